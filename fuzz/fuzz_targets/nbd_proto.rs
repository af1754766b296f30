//! cargo-fuzz target `nbd_proto`: every NBD wire decoder in src/nbd/proto.rs on
//! arbitrary bytes. Properties: no decoder panics; a request `check_request`
//! accepts lies inside the export and carries at most MAX_PAYLOAD bytes; a decoded
//! request re-encodes to the same bytes.
#![no_main]

use sluice::nbd::proto::*;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = parse_info_request(data);
    let _ = parse_meta_request(data);
    if data.len() >= 4 {
        let _ = parse_client_flags(data[..4].try_into().unwrap());
    }
    if data.len() >= OPTION_HEADER_BYTES {
        let _ = parse_option_header(data[..OPTION_HEADER_BYTES].try_into().unwrap());
    }
    if data.len() >= REQUEST_BYTES {
        let h: [u8; REQUEST_BYTES] = data[..REQUEST_BYTES].try_into().unwrap();
        if let Ok(r) = Request::decode(&h) {
            assert_eq!(r.encode(), h);
            let ctl = data.get(REQUEST_BYTES).copied().unwrap_or(0);
            let n = Negotiated {
                size: u64::from_le_bytes(
                    data.get(REQUEST_BYTES + 1..REQUEST_BYTES + 9)
                        .and_then(|b| b.try_into().ok())
                        .unwrap_or([0, 0, 0, 64, 0, 0, 0, 0]),
                ),
                read_only: ctl & 1 != 0,
                structured: ctl & 2 != 0,
                base_allocation: ctl & 4 != 0,
            };
            if check_request(&r, &n).is_ok() {
                assert!(r.offset.checked_add(r.length as u64).is_some_and(|e| e <= n.size));
                assert!(r.payload_len() <= MAX_PAYLOAD);
                if n.read_only {
                    assert!(!matches!(r.cmd, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES));
                }
            }
        }
    }
});
