//! Compiles lb.proto with protoc (Debian's protobuf-compiler) into tonic
//! client and server code, plus a descriptor set for server reflection.

fn main() {
    println!("cargo:rerun-if-changed=lb.proto");
    if std::process::Command::new(std::env::var("PROTOC").unwrap_or_else(|_| "protoc".into()))
        .arg("--version")
        .output()
        .is_err()
    {
        println!("cargo::error=protoc not found: install it with `apt-get install protobuf-compiler` (or run scripts/setup.sh)");
        return;
    }
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    if let Err(e) = tonic_prost_build::configure()
        .codec_path("crate::bounded::BoundedCodec")
        .file_descriptor_set_path(out.join("lb_descriptor.bin"))
        .compile_protos(&["lb.proto"], &["."])
    {
        println!("cargo::error=compiling lb.proto failed: {e}");
    }
}
