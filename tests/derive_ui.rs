//! Compile-time behaviour of `#[derive(Persistent)]`: every accepted shape compiles and
//! runs (`tests/ui/pass`), and every mistake fails with its own message, at the offending
//! field or attribute (`tests/ui/fail/*.rs` against their `.stderr`).
//!
//! After a deliberate change of a message, re-bless with
//! `TRYBUILD=overwrite cargo test --test derive_ui` and review each changed `.stderr`.

#[test]
fn derive_persistent_ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
