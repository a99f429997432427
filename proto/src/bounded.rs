//! The codec of the `LoadBalancer` service: prost's, with the counts of a
//! request's repeated fields checked on its wire bytes before it is
//! decoded.
//!
//! The server's message size limit bounds a request's bytes, not what
//! they decode to. An entry of a repeated message field can be two bytes on
//! the wire (a tag and a zero length) and is a whole struct once decoded:
//! an empty `Change` takes 120 bytes, 60 times its wire size (`pb::Change`
//! holds the largest of its variants), in a vector that doubles as it
//! grows, so a 256 MiB Apply of empty changes would ask for 15-30 GiB
//! before any validation ran, and the allocation failure would abort the
//! process, data plane included. So the entries of every repeated
//! field of the requests are counted first (`ApplyRequest.changes`,
//! `ResyncRequest`'s services, frontends and backends, and every service's
//! `source_ranges`, which prost accumulates across the occurrences of a
//! message field), and a request over a bound is refused whole, as
//! `INVALID_ARGUMENT` naming the field, before anything is allocated for
//! it. Singular fields cannot add up (a later occurrence replaces an
//! earlier one) and unknown fields are skipped, so within the bounds a
//! request decodes to at most ~130 bytes per counted object (24 per
//! source range) plus its strings' bytes: ~0.4 GB for the largest
//! Resync, ~0.6 GB while its vectors grow. The bounds are per request,
//! and requests decode concurrently; the API's clients are the node's
//! operators and controllers (a root-only socket, or TLS with client
//! certificates).
//!
//! Input that is not valid protobuf is left to prost's decode, which
//! refuses it, except groups (wire types 3 and 4), which `lb.v1` never
//! uses and prost would skip unread: refused here, so nothing goes
//! uncounted.

use std::any::TypeId;
use std::marker::PhantomData;

use prost::bytes::Buf;
use prost::Message;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::Status;
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

use crate::v1 as pb;

/// Changes in one Apply.
pub const MAX_CHANGES: usize = 1_000_000;
/// Services, frontends and backends together in one Resync: a cluster's
/// whole state, so more than an Apply takes.
pub const MAX_RESYNC_OBJECTS: usize = 2_000_000;
/// Source ranges of all the services of one request together (each service
/// takes at most 256, which the control plane checks after decoding): a
/// Resync cannot be split, so room for 16,384 services with 256 each.
pub const MAX_REQUEST_SOURCE_RANGES: usize = 4_194_304;

/// [`ProstCodec`] with the request bounds of the module doc on decoding.
#[derive(Debug, Clone)]
pub struct BoundedCodec<T, U> {
    _pd: PhantomData<(T, U)>,
}

impl<T, U> Default for BoundedCodec<T, U> {
    fn default() -> Self {
        BoundedCodec { _pd: PhantomData }
    }
}

impl<T, U> Codec for BoundedCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = BoundedDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        BoundedDecoder {
            inner: ProstCodec::<T, U>::raw_decoder(BufferSettings::default()),
        }
    }
}

/// [`ProstDecoder`] after [`check_request`].
#[derive(Debug, Clone)]
pub struct BoundedDecoder<U> {
    inner: ProstDecoder<U>,
}

impl<U: Message + Default + 'static> Decoder for BoundedDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        // tonic hands a decoder the whole message in one buffer; were it
        // ever in pieces, it is gathered first rather than left unchecked.
        if buf.chunk().len() == buf.remaining() {
            check_request::<U>(buf.chunk()).map_err(Status::invalid_argument)?;
            return self.inner.decode(buf);
        }
        let whole = buf.copy_to_bytes(buf.remaining());
        check_request::<U>(&whole).map_err(Status::invalid_argument)?;
        U::decode(whole)
            .map(Some)
            .map_err(|e| Status::internal(e.to_string()))
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.inner.buffer_settings()
    }
}

/// The bounds of the module doc for a message of type `U` encoded as
/// `wire`; every other message type passes unexamined (none has a
/// repeated field in a request).
pub fn check_request<U: 'static>(wire: &[u8]) -> Result<(), String> {
    let id = TypeId::of::<U>();
    if id == TypeId::of::<pb::ApplyRequest>() {
        check_apply(wire)
    } else if id == TypeId::of::<pb::ResyncRequest>() {
        check_resync(wire)
    } else {
        Ok(())
    }
}

/// `ApplyRequest`: `changes` (1), each a `Change` whose `upsert_service`
/// (1) is a `Service` with `source_ranges` (5).
fn check_apply(wire: &[u8]) -> Result<(), String> {
    let (mut changes, mut ranges) = (0usize, 0usize);
    for field in Fields(wire) {
        let Field::Bytes(1, change) = field? else {
            continue;
        };
        changes += 1;
        if changes > MAX_CHANGES {
            return Err(format!(
                "request: changes: more than {MAX_CHANGES} changes, at most {MAX_CHANGES} in one Apply"
            ));
        }
        for field in Fields(change) {
            if let Field::Bytes(1, service) = field.map_err(|e| format!("request: changes: {e}"))? {
                ranges += count_source_ranges(service).map_err(|e| format!("request: changes: {e}"))?;
            }
        }
        if ranges > MAX_REQUEST_SOURCE_RANGES {
            return Err(too_many_ranges());
        }
    }
    Ok(())
}

/// `ResyncRequest`: `services` (2, each with `source_ranges`, 5),
/// `frontends` (3) and `backends` (4).
fn check_resync(wire: &[u8]) -> Result<(), String> {
    let (mut objects, mut ranges) = (0usize, 0usize);
    for field in Fields(wire) {
        let (n, body) = match field? {
            Field::Bytes(n @ 2..=4, body) => (n, body),
            _ => continue,
        };
        objects += 1;
        if objects > MAX_RESYNC_OBJECTS {
            return Err(format!(
                "request: services, frontends, backends: more than {MAX_RESYNC_OBJECTS} objects, at most {MAX_RESYNC_OBJECTS} in one Resync"
            ));
        }
        if n == 2 {
            ranges += count_source_ranges(body).map_err(|e| format!("request: services: {e}"))?;
            if ranges > MAX_REQUEST_SOURCE_RANGES {
                return Err(too_many_ranges());
            }
        }
    }
    Ok(())
}

fn too_many_ranges() -> String {
    format!(
        "request: source_ranges: more than {MAX_REQUEST_SOURCE_RANGES} source ranges over all services, at most {MAX_REQUEST_SOURCE_RANGES} in one request"
    )
}

/// The `source_ranges` (5) entries of a `Service`'s wire bytes.
fn count_source_ranges(service: &[u8]) -> Result<usize, String> {
    let mut n = 0;
    for field in Fields(service) {
        if let Field::Bytes(5, _) = field? {
            n += 1;
        }
    }
    Ok(n)
}

/// One field of a message's wire bytes: a length-delimited one with its
/// number and bytes, or another (varint, fixed).
#[derive(Debug, PartialEq, Eq)]
enum Field<'a> {
    Bytes(u32, &'a [u8]),
    Other,
}

/// The fields of a message's wire bytes, in order; an error ends them.
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = Result<Field<'a>, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let r = self.field();
        if r.is_err() {
            self.0 = &[];
        }
        Some(r)
    }
}

impl<'a> Fields<'a> {
    fn field(&mut self) -> Result<Field<'a>, String> {
        let key = self.varint()?;
        let number = u32::try_from(key >> 3).map_err(|_| "malformed protobuf: field number".to_string())?;
        match key & 7 {
            0 => self.varint().map(|_| Field::Other),
            1 => self.skip(8).map(|_| Field::Other),
            2 => {
                let len =
                    usize::try_from(self.varint()?).map_err(|_| "malformed protobuf: length".to_string())?;
                let body = self
                    .0
                    .get(..len)
                    .ok_or("malformed protobuf: length past the end")?;
                self.0 = &self.0[len..];
                Ok(Field::Bytes(number, body))
            }
            5 => self.skip(4).map(|_| Field::Other),
            3 | 4 => Err(format!("field {number}: a group, which lb.v1 does not use")),
            t => Err(format!("malformed protobuf: wire type {t}")),
        }
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for (i, &b) in self.0.iter().take(10).enumerate() {
            // A tenth byte holds bit 63 alone (prost refuses more).
            if i == 9 && b > 1 {
                break;
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.0 = &self.0[i + 1..];
                return Ok(v);
            }
        }
        Err("malformed protobuf: varint".to_string())
    }

    fn skip(&mut self, n: usize) -> Result<(), String> {
        if self.0.len() < n {
            return Err("malformed protobuf: field past the end".to_string());
        }
        self.0 = &self.0[n..];
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(name: &str, ranges: usize) -> pb::Service {
        pb::Service {
            name: name.into(),
            source_ranges: vec!["10.0.0.0/8".into(); ranges],
            ..Default::default()
        }
    }

    fn upsert(s: pb::Service) -> pb::Change {
        pb::Change {
            change: Some(pb::change::Change::UpsertService(s)),
        }
    }

    /// What the module doc says of a request's expansion, measured: an
    /// empty change is two bytes on the wire and much more decoded.
    #[test]
    fn an_empty_change_is_two_bytes_and_a_struct() {
        let one = pb::ApplyRequest {
            changes: vec![pb::Change::default()],
            ..Default::default()
        };
        assert_eq!(one.encoded_len(), 2);
        let size = std::mem::size_of::<pb::Change>();
        assert!(size >= 100, "{size}");
    }

    #[test]
    fn requests_within_the_bounds_pass_and_decode_unchanged() {
        let apply = pb::ApplyRequest {
            changes: vec![upsert(service("a/b", 3)), pb::Change::default()],
            source: 2,
            expected_revision: 7,
        };
        let wire = apply.encode_to_vec();
        assert_eq!(check_request::<pb::ApplyRequest>(&wire), Ok(()));
        assert_eq!(pb::ApplyRequest::decode(&wire[..]).unwrap(), apply);
        let resync = pb::ResyncRequest {
            services: vec![service("a/b", 256)],
            frontends: vec![pb::Frontend::default(); 3],
            backends: vec![pb::Backend::default(); 5],
            ..Default::default()
        };
        assert_eq!(
            check_request::<pb::ResyncRequest>(&resync.encode_to_vec()),
            Ok(())
        );
        // Other messages are not examined.
        assert_eq!(check_request::<pb::GetStatsRequest>(&[0xff]), Ok(()));
    }

    #[test]
    fn too_many_changes_are_refused_before_decoding() {
        // MAX_CHANGES + 1 empty changes: 2 bytes each on the wire.
        let wire = [0x0a, 0x00].repeat(MAX_CHANGES + 1);
        let e = check_request::<pb::ApplyRequest>(&wire).unwrap_err();
        assert!(
            e.starts_with("request: changes: more than 1000000 changes"),
            "{e}"
        );
        assert_eq!(
            check_request::<pb::ApplyRequest>(&wire[2..]),
            Ok(()),
            "exactly the bound"
        );
    }

    #[test]
    fn too_many_resync_objects_are_refused() {
        // Services (2), frontends (3) and backends (4) count together.
        let mut wire = [0x12, 0x00, 0x1a, 0x00].repeat(MAX_RESYNC_OBJECTS / 2);
        assert_eq!(check_request::<pb::ResyncRequest>(&wire), Ok(()));
        wire.extend_from_slice(&[0x22, 0x00]);
        let e = check_request::<pb::ResyncRequest>(&wire).unwrap_err();
        assert!(
            e.starts_with("request: services, frontends, backends: more than"),
            "{e}"
        );
    }

    #[test]
    fn source_ranges_count_across_services_and_merged_occurrences() {
        // A change naming its service twice: prost merges the two, so the
        // ranges of both count.
        let s = service("a/b", 1024).encode_to_vec();
        let mut change = Vec::new();
        for _ in 0..2 {
            change.push(0x0a);
            prost::encoding::encode_varint(s.len() as u64, &mut change);
            change.extend_from_slice(&s);
        }
        let merged = pb::Change::decode(&change[..]).unwrap();
        let Some(pb::change::Change::UpsertService(m)) = merged.change else {
            panic!("{merged:?}")
        };
        assert_eq!(m.source_ranges.len(), 2048, "prost merged the occurrences");
        let mut wire = Vec::new();
        for _ in 0..MAX_REQUEST_SOURCE_RANGES / 2048 {
            wire.push(0x0a);
            prost::encoding::encode_varint(change.len() as u64, &mut wire);
            wire.extend_from_slice(&change);
        }
        assert_eq!(
            check_request::<pb::ApplyRequest>(&wire),
            Ok(()),
            "exactly the bound"
        );
        // One more range, in one more change (concatenated messages merge).
        let extra = pb::ApplyRequest {
            changes: vec![upsert(service("c/d", 1))],
            ..Default::default()
        };
        wire.extend_from_slice(&extra.encode_to_vec());
        let e = check_request::<pb::ApplyRequest>(&wire).unwrap_err();
        assert!(e.starts_with("request: source_ranges: more than 4194304"), "{e}");
        // The same in a Resync's services.
        let mut wire = Vec::new();
        let s = service("a/b", 1024).encode_to_vec();
        for _ in 0..=MAX_REQUEST_SOURCE_RANGES / 1024 {
            wire.push(0x12);
            prost::encoding::encode_varint(s.len() as u64, &mut wire);
            wire.extend_from_slice(&s);
        }
        let e = check_request::<pb::ResyncRequest>(&wire).unwrap_err();
        assert!(e.starts_with("request: source_ranges: more than"), "{e}");
    }

    #[test]
    fn groups_and_broken_wire_are_refused() {
        // A start-group of field 9, which prost would skip unread.
        let e = check_request::<pb::ApplyRequest>(&[0x4b, 0x4c]).unwrap_err();
        assert!(e.contains("group"), "{e}");
        let too_long = [0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        for wire in [
            &[0x0a, 0x05, 0x00][..],
            &[0x0a][..],
            &[0x08, 0xff][..],
            &[0x0f][..],
            &too_long[..],
        ] {
            let e = check_request::<pb::ApplyRequest>(wire).unwrap_err();
            assert!(e.contains("malformed protobuf"), "{wire:?}: {e}");
            assert!(
                pb::ApplyRequest::decode(wire).is_err(),
                "prost refuses it too: {wire:?}"
            );
        }
        // Inside a change, named.
        let e = check_request::<pb::ApplyRequest>(&[0x0a, 0x02, 0x0a, 0x05]).unwrap_err();
        assert!(e.starts_with("request: changes: malformed protobuf"), "{e}");
    }
}
