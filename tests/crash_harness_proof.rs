//! Proof that the crash harness has teeth: with a commit that skips flushing its applied
//! redo entries (`pgl::fault::set_drop_apply_flush`, a test-only fault), the same scenario
//! that passes on the correct runtime must produce violations.
//!
//! The fault switch is process-global, so this binary holds a single test that runs the
//! control and the faulty run one after the other, and always turns the fault off again.
mod common;

use common::crash::*;

/// Turns the fault off when dropped, even if the test panics.
struct FaultOff;
impl Drop for FaultOff {
    fn drop(&mut self) {
        pgl::fault::set_drop_apply_flush(false);
    }
}

/// Two consecutive overwrites of the same object (the second record retires the first), then
/// an overwrite of another object in the next transaction on the same lane. The setup runs on
/// the correct runtime; `fault` applies to the checked ops only.
fn scenario(suite: &mut Suite, fault: bool) {
    let mut run = suite.run(
        "overwrite, overwrite again, overwrite another",
        config(1),
        7,
    );
    // Slots 0 and 1: the model is empty.
    run.setup(|pool, root, m, rng| fill_slots(pool, root, m, rng, &[1024, 256]));
    pgl::fault::set_drop_apply_flush(fault);
    for (slot, n, at, len) in [(0, 1024, 64, 200), (0, 1024, 512, 300), (1, 256, 0, 256)] {
        let patch = run.rng.bytes(len);
        run.op(
            "overwrite",
            format!("write slot {slot} [{at}, {})", at + len),
            |pool, root, m, _| {
                let oid = slot_oid(pool, root, slot);
                pool.tx(|tx| tx_write(tx, oid, n, at, &patch))
                    .expect("overwrite");
                m.write(slot, at, &patch);
            },
        );
    }
    pgl::fault::set_drop_apply_flush(false);
}

#[test]
fn dropped_apply_flush_is_caught() {
    let _off = FaultOff;

    let mut control = Suite::with_target("proof control: correct runtime", 0);
    scenario(&mut control, false);
    let control = control.finish();
    assert_eq!(
        control.violation_count, 0,
        "the proof scenario must pass on the correct runtime: {:#?}",
        control.violations
    );

    let mut faulty = Suite::with_target("proof: apply flush dropped", 0);
    scenario(&mut faulty, true);
    let faulty = faulty.finish();
    assert!(
        faulty.violation_count > 0,
        "the crash harness found no violation although commits skipped the flush of applied \
         entries ({} states explored): the harness is blind",
        faulty.states
    );
    println!(
        "harness proof: {} of {} crash states violate the model with the flush dropped; \
         first:\n{}",
        faulty.violation_count, faulty.states, faulty.violations[0]
    );
}
