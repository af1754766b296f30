//! Running out of file descriptors while a thread sets up its io_uring ring is
//! transient (issue 17, finding 12): that batch reads one at a time and
//! io_uring stays on for the process. (Its own test binary: it lowers the
//! process's descriptor limit.)

use sluice::media::{AlignedBuf, FileMedia, Media};

#[test]
fn emfile_at_ring_set_up_does_not_turn_io_uring_off() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.img");
    std::fs::write(&path, vec![7u8; 64 * 1024]).unwrap();
    let media = std::sync::Arc::new(FileMedia::open(&path, true).unwrap());
    // the lowest free descriptor number: with the limit there, any new one fails
    let probe = std::fs::File::open(&path).unwrap();
    let lowest = std::os::unix::io::AsRawFd::as_raw_fd(&probe) as u64;
    drop(probe);
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a struct we own.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut old) };
    let tight = libc::rlimit {
        rlim_cur: lowest,
        rlim_max: old.rlim_max,
    };
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &tight) }, 0);
    // a fresh thread has no ring yet: its set-up meets EMFILE
    let m = media.clone();
    let r = std::thread::spawn(move || {
        let mut a = AlignedBuf::new(4096);
        let mut b = AlignedBuf::new(4096);
        let mut reads: Vec<(&mut [u8], u64)> = vec![(&mut a[..], 0), (&mut b[..], 8192)];
        let r = m.read_batch(&mut reads);
        (r.is_ok(), a[0], b[0])
    })
    .join()
    .unwrap();
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &old) }, 0);
    assert_eq!(r, (true, 7, 7), "the batch is read one at a time");
    assert!(
        !sluice::media::io_uring_given_up(),
        "EMFILE is transient: io_uring must stay on for the process"
    );
}
