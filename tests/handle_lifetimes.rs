//! Compile-time guarantees of the handles: a `Mut`, `Read` or `Place` never outlives the
//! transaction (or handle) it borrows, and a `Ref` or `Detached` never outlives its pool.
//! Each mistake is pinned by a file of `tests/ui/handles` that must not compile, with the
//! borrow checker's message in its `.stderr`. (`Send`/`Sync` of the handles are pinned
//! in `pool_smoke.rs`.)
//!
//! After a change of a message, re-bless with
//! `TRYBUILD=overwrite cargo test --test handle_lifetimes` and review each `.stderr`.

#[test]
fn handles_do_not_outlive_what_they_borrow() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/handles/*.rs");
}
