// The `&Tx` a closure gets is only for the closure's run: it cannot be kept for later
// (the transaction has committed by then).
use pgl::prelude::*;

fn main() -> pgl::Result<()> {
    let pool = Pool::create("/dev/null/never", &Config::small("ui"))?;
    let mut kept = None;
    pool.tx(|tx| {
        kept = Some(tx);
        Ok(())
    })?;
    let _ = kept.unwrap().alloc(1u64);
    Ok(())
}
