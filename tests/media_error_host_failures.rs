//! Media-error emulation when the host refuses what it relies on (`mprotect`): injection
//! fails with a typed error and changes nothing; the handler, unable to make a lost page
//! accessible again, hands the fault to the previous handler instead of writing to it.
//! The host faults are process-wide switches (`pgl::fault`): the tests that turn them on
//! take `SWITCHES`, and the handler's test runs in a child process.

mod support;

use pgl::{fault, Config, Error, Fault, Oid, Pool};
use std::sync::Mutex;

/// Held by a test while it has a process-wide fault switch on.
static SWITCHES: Mutex<()> = Mutex::new(());

fn path(name: &str) -> std::path::PathBuf {
    let p = support::test_dir().join(format!("pgl-media-host-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

#[test]
fn a_failed_mprotect_fails_the_injection_and_changes_nothing() {
    let _on = SWITCHES.lock().unwrap_or_else(|e| e.into_inner());
    let p = path("inject");
    let pool = Pool::create(&p, &Config::small("media")).unwrap();
    let o: Oid<[u64; 8]> = pool.tx(|tx| tx.alloc([7; 8])).unwrap();
    // Faults: 1 injection attempted while every mprotect fails; none takes effect.
    fault::set_fail_mprotect(true);
    let r = pool.inject(&Fault::MediaError { offset: o.raw() });
    fault::set_fail_mprotect(false);
    match &r {
        Err(e @ Error::FaultInjection { offset, source, .. }) => {
            assert_eq!(*offset, o.raw());
            assert!(source.is_some(), "the OS error is kept");
            let msg = e.to_string();
            assert!(
                msg.contains("mprotect") && msg.contains("unchanged"),
                "{msg}"
            );
        }
        other => panic!("expected Error::FaultInjection, got {other:?}"),
    }
    // Nothing is left half-injected: the page reads as before without any fault, and a
    // later injection (mprotect working again) is repaired as usual.
    assert_eq!(*pool.get(o).unwrap(), [7; 8]);
    let s = pool.stats();
    assert_eq!((s.media_errors_repaired, s.media_errors_lost), (0, 0));
    pool.inject(&Fault::MediaError { offset: o.raw() }).unwrap();
    assert_eq!(*pool.get(o).unwrap(), [7; 8]);
    assert_eq!(pool.stats().media_errors_repaired, 1);
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

/// The child's own SIGSEGV handler, installed before pgl's: reaching it proves the fault
/// was handed on.
extern "C" fn previous_handler(_sig: libc::c_int) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(42) };
}

#[test]
fn a_lost_page_the_handler_cannot_unprotect_goes_to_the_previous_handler() {
    // The handler cannot make the lost page accessible again (mprotect fails), so it cannot
    // rebuild it: writing to the page would fault again with SIGSEGV blocked, which kills
    // the process without any handler. It must hand the fault on instead; here the previous
    // handler is the child's own, which exits with 42.
    if std::env::var("PGL_MEDIA_MPROTECT_CHILD").is_ok() {
        // SAFETY: a zeroed sigaction with a handler of the plain signature.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = previous_handler as *const () as usize;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(libc::SIGSEGV, &act, std::ptr::null_mut());
        }
        let p = path("child");
        let pool = Pool::create(&p, &Config::small("media")).unwrap();
        std::fs::remove_file(&p).unwrap();
        let o: Oid<[u64; 8]> = pool.tx(|tx| tx.alloc([7; 8])).unwrap();
        // Faults: 1 media error, injected; then every mprotect fails.
        pool.inject(&Fault::MediaError { offset: o.raw() }).unwrap();
        fault::set_fail_mprotect(true);
        let v = *pool.get(o).unwrap();
        panic!("the load of a page that could not be rebuilt returned {v:?}");
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "a_lost_page_the_handler_cannot_unprotect_goes_to_the_previous_handler",
            "--exact",
            "--nocapture",
        ])
        .env("PGL_MEDIA_MPROTECT_CHILD", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(42),
        "the previous handler ran ({:?}): {stderr}",
        out.status
    );
    assert!(
        stderr.contains("cannot be made accessible again"),
        "pgl says why: {stderr}"
    );
}

#[test]
fn a_page_left_unreadable_at_close_keeps_only_its_own_column_as_it_is() {
    // `a` and `b` are lost for good (one column, both read: the handler zero-fills them);
    // the close recomputes their column's parity over the zeros. `s`, in another column
    // of the zone, is lost and never read, and the close cannot make it readable again
    // (every mprotect fails then): its own column cannot be recomputed, but that must not
    // keep `a` and `b`'s from it, or a later loss there (`c`) is rebuilt from parity that
    // still holds their old bytes: wrong bytes, counted as repaired.
    // Faults: 4 media errors; 2 lost for good, 1 left unreadable at close, 1 repaired.
    let _on = SWITCHES.lock().unwrap_or_else(|e| e.into_inner());
    let p = path("stuck-close");
    let cfg = Config::small("media");
    let geo = cfg.geometry();
    let cfg = cfg.size(geo.pool_size(2));
    let pool = Pool::create(&p, &cfg).unwrap();
    let value = |i: u64| [i; 100];
    let [a, b, c] = support::same_column(&pool, &geo, 3, true, value)[..] else {
        unreachable!()
    };
    let zone = |o: Oid<[u64; 100]>| (o.raw() - geo.zones_offset()) / geo.zone_size();
    let column = |o: Oid<[u64; 100]>| (o.raw() - geo.zones_offset()) % geo.row_size() / 4096;
    let s = (0..20_000u64)
        .map(|i| pool.tx(|tx| tx.alloc(value(i))).unwrap())
        .find(|&o| zone(o) == zone(a) && column(o) != column(a))
        .expect("an object in another column of the zone");
    let want_c = *pool.get(c).unwrap();
    support::lose_for_good(&pool, &[a, b]);
    pool.inject(&Fault::MediaError { offset: s.raw() }).unwrap();
    fault::set_fail_mprotect(true);
    drop(pool);
    fault::set_fail_mprotect(false);
    let pool = Pool::open_with(&p, &cfg).unwrap();
    // Rebuilt from its column's parity, recomputed over the zeros.
    support::assert_rebuilt(&pool, c, &want_c);
    let st = pool.stats();
    assert_eq!((st.media_errors_repaired, st.media_errors_lost), (1, 0));
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn media_errors_are_refused_where_system_pages_are_not_4_kib() {
    // The handler protects and rebuilds 4 KiB pages; with 16 KiB system pages `mprotect`
    // of one would fail (or protect its neighbours). The pool works; injection says why not.
    let _on = SWITCHES.lock().unwrap_or_else(|e| e.into_inner());
    let p = path("pages");
    fault::set_fake_large_pages(true);
    let pool = Pool::create(&p, &Config::small("media"));
    let pool = pool.and_then(|pool| {
        let o: Oid<[u64; 8]> = pool.tx(|tx| tx.alloc([7; 8]))?;
        // Faults: 1 injection attempted, refused.
        let r = pool.inject(&Fault::MediaError { offset: o.raw() });
        Ok((pool, o, r))
    });
    fault::set_fake_large_pages(false);
    let (pool, o, r) = pool.unwrap();
    match &r {
        Err(e @ Error::FaultInjection { offset, .. }) => {
            assert_eq!(*offset, o.raw());
            let msg = e.to_string();
            assert!(msg.contains("16384") && msg.contains("4096"), "{msg}");
        }
        other => panic!("expected Error::FaultInjection, got {other:?}"),
    }
    assert_eq!(*pool.get(o).unwrap(), [7; 8]);
    let s = pool.stats();
    assert_eq!((s.media_errors_repaired, s.media_errors_lost), (0, 0));
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}
