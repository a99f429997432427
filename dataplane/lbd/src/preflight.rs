//! Checks made before EAL starts, so that common mistakes get one clear
//! line instead of a page of EAL messages: PCI devices that do not exist,
//! no hugepages when `--no-huge` was not given, and connection tables
//! larger than the memory available. Also what the kernel
//! does with the huge page advice on the conntrack tables.

use std::path::Path;

use crate::cli::normalise_bdf;

/// Normalises and checks each `--pci` address; returns them in canonical form.
pub fn check_pci(pci: &[String]) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for p in pci {
        let bdf = normalise_bdf(p)
            .ok_or_else(|| anyhow::anyhow!("--pci {p:?}: not a PCI address (expected e.g. 0000:03:00.0)"))?;
        if !Path::new("/sys/bus/pci/devices").join(&bdf).exists() {
            anyhow::bail!(
                "PCI device {bdf} does not exist on this host (list devices with `dpdk-devbind.py --status`)"
            );
        }
        out.push(bdf);
    }
    Ok(out)
}

/// IPv6 connections tracked per worker for `--conntrack-size N`: a
/// sixteenth, at least 1024 (what `main` gives each worker's table).
pub fn conntrack_v6(size: u32) -> u32 {
    (size / 16).max(1024)
}

/// Bytes of one worker's connection tables for `--conntrack-size N`: its
/// IPv4 and IPv6 entries with their share of the index (the SNAT reply
/// cells are mapped lazily and left out).
pub fn conntrack_bytes_per_worker(size: u32) -> u64 {
    use lb_dataplane::conntrack::Conntrack;
    size as u64 * Conntrack::BYTES_PER_CONN_V4 as u64
        + conntrack_v6(size) as u64 * Conntrack::BYTES_PER_CONN_V6 as u64
}

/// Bytes of the client-IP affinity table for `--affinity-size N`.
pub fn affinity_bytes(size: u32) -> u64 {
    use lb_dataplane::affinity::BYTES_PER_PIN;
    u64::from(size).next_power_of_two() * BYTES_PER_PIN as u64
}

/// Fails when the connection tables of `workers` workers do not fit in the
/// memory the kernel says is available, less `dpdk_mib` MiB that DPDK
/// takes from the same ordinary memory (`--mem` with `--no-huge`; 0 with
/// hugepages) and the affinity table: allocating them would abort lbd, or wake the OOM killer,
/// once EAL and the ports are up. Skipped when /proc/meminfo cannot be
/// read.
pub fn check_conntrack_memory(size: u32, workers: usize, dpdk_mib: u64) -> anyhow::Result<()> {
    let Some(available) = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| mem_available_of(&t))
    else {
        tracing::debug!("no MemAvailable in /proc/meminfo: the conntrack tables' size is not checked");
        return Ok(());
    };
    check_conntrack_fits(size, workers, available.saturating_sub(dpdk_mib << 20))
}

/// [`check_conntrack_memory`] against `available` bytes (DPDK's share
/// already taken off).
fn check_conntrack_fits(size: u32, workers: usize, available: u64) -> anyhow::Result<()> {
    const MIB: u64 = 1 << 20;
    let each = conntrack_bytes_per_worker(size);
    let need = each * workers as u64;
    if need > available {
        anyhow::bail!(
            "--conntrack-size {size}: the connection tables need {} MiB ({} MiB for each of {workers} workers), more than the {} MiB available (MemAvailable in /proc/meminfo, less DPDK's --mem under --no-huge and the affinity table): lower --conntrack-size (or --affinity-size) or use fewer workers",
            need.div_ceil(MIB),
            each.div_ceil(MIB),
            available / MIB
        );
    }
    Ok(())
}

/// `MemAvailable` of /proc/meminfo's text, in bytes.
fn mem_available_of(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut words = line.split_whitespace().skip(1);
    let n: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => n.checked_mul(1024),
        None => Some(n),
        Some(_) => None,
    }
}

/// The kernel driver a PCI device is bound to, if any.
pub fn pci_driver(bdf: &str) -> Option<String> {
    let link = std::fs::read_link(Path::new("/sys/bus/pci/devices").join(bdf).join("driver")).ok()?;
    Some(link.file_name()?.to_string_lossy().into_owned())
}

/// Fails unless some hugepages are free and hugetlbfs is mounted.
pub fn check_hugepages() -> anyhow::Result<()> {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    check_hugepages_at(Path::new("/sys/kernel/mm/hugepages"), &mounts)
}

/// [`check_hugepages`] over a given sysfs hugepages directory and mount table.
fn check_hugepages_at(sys: &Path, mounts: &str) -> anyhow::Result<()> {
    const HOW: &str = "reserve them with `echo 1024 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages && \
                       mount -t hugetlbfs nodev /dev/hugepages` (scripts/setup.sh does it), or pass --no-huge";
    let mut free = 0u64;
    if let Ok(dir) = std::fs::read_dir(sys) {
        for e in dir.flatten() {
            if let Ok(s) = std::fs::read_to_string(e.path().join("free_hugepages")) {
                free += s.trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    if free == 0 {
        anyhow::bail!("no free hugepages: {HOW}");
    }
    if !mounts
        .lines()
        .any(|l| l.split_whitespace().nth(2) == Some("hugetlbfs"))
    {
        anyhow::bail!("no hugetlbfs is mounted: {HOW}");
    }
    Ok(())
}

/// The kernel's transparent huge page mode, the bracketed word of
/// `/sys/kernel/mm/transparent_hugepage/enabled` (`always`, `madvise` or
/// `never`); `None` if the kernel has no THP.
pub fn thp_mode() -> Option<String> {
    thp_mode_of(&std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?)
}

/// [`thp_mode`] of the file's text, e.g. `always [madvise] never`.
fn thp_mode_of(text: &str) -> Option<String> {
    let (_, rest) = text.split_once('[')?;
    let (mode, _) = rest.split_once(']')?;
    Some(mode.to_string())
}

/// Logs whether the conntrack tables (allocated with `MADV_HUGEPAGE`, see
/// `dpdk::HugePageAdvice`) can get transparent huge pages.
pub fn report_thp() {
    const HOW: &str = "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled";
    match thp_mode().as_deref() {
        Some(m @ ("always" | "madvise")) => {
            tracing::info!(
                mode = m,
                "transparent huge pages: the conntrack tables are advised"
            )
        }
        Some(m) => tracing::warn!(
            mode = m,
            "transparent huge pages are off: the conntrack tables use 4 KiB pages, \
             slower for new flows under load (`{HOW}` enables them)"
        ),
        None => {
            tracing::warn!("this kernel has no transparent huge pages: the conntrack tables use 4 KiB pages")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thp_mode_is_the_bracketed_word() {
        assert_eq!(
            thp_mode_of("always [madvise] never\n").as_deref(),
            Some("madvise")
        );
        assert_eq!(thp_mode_of("[always] madvise never\n").as_deref(), Some("always"));
        assert_eq!(thp_mode_of("always madvise [never]\n").as_deref(), Some("never"));
        assert_eq!(thp_mode_of("garbage"), None);
    }

    #[test]
    fn hugepage_checks() {
        let dir = std::env::temp_dir().join(format!("lbd-huge-{}", std::process::id()));
        let size = dir.join("hugepages-2048kB");
        std::fs::create_dir_all(&size).unwrap();
        let mounted = "nodev /dev/hugepages hugetlbfs rw,relatime 0 0\n";
        std::fs::write(size.join("free_hugepages"), "0\n").unwrap();
        let e = check_hugepages_at(&dir, mounted).unwrap_err().to_string();
        assert!(
            e.contains("no free hugepages") && e.contains("--no-huge") && e.contains("nr_hugepages"),
            "{e}"
        );
        std::fs::write(size.join("free_hugepages"), "512\n").unwrap();
        check_hugepages_at(&dir, mounted).unwrap();
        let e = check_hugepages_at(&dir, "proc /proc proc rw 0 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no hugetlbfs is mounted"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn conntrack_memory() {
        // The README's figures: 96 and 160 bytes a connection, 106 MiB a
        // worker by default.
        assert_eq!(
            conntrack_bytes_per_worker(1 << 20),
            (1 << 20) * 96 + (1 << 16) * 160
        );
        assert_eq!(conntrack_bytes_per_worker(1 << 20) >> 20, 106);
        assert_eq!(conntrack_v6(1024), 1024);
        assert_eq!(conntrack_bytes_per_worker(1024), 1024 * 96 + 1024 * 160);
        let each = conntrack_bytes_per_worker(1 << 26);
        check_conntrack_fits(1 << 26, 3, 3 * each).unwrap();
        let e = check_conntrack_fits(1 << 26, 3, 3 * each - 1)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--conntrack-size 67108864: the connection tables need 20352 MiB (6784 MiB for each of 3 workers)"),
            "{e}"
        );
        assert!(e.contains("MemAvailable") && !e.contains('\n'), "{e}");
        let meminfo = "MemTotal:       24683656 kB\nMemFree:  1 kB\nMemAvailable:   21743144 kB\n";
        assert_eq!(mem_available_of(meminfo), Some(21743144 * 1024));
        assert_eq!(mem_available_of("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn pci_errors() {
        let e = check_pci(&["nonsense".into()]).unwrap_err().to_string();
        assert!(e.contains("not a PCI address"), "{e}");
        let e = check_pci(&["0000:fe:1f.7".into()]).unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
    }
}
