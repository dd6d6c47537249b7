// A nested `pool.tx` joins the outer transaction, but its handles still end with its own
// closure: one cannot be carried out into the outer closure.
use pgl::prelude::*;

fn main() -> pgl::Result<()> {
    let pool = Pool::create("/dev/null/never", &Config::small("ui"))?;
    let x: Oid<u64> = Oid::NULL;
    pool.tx(|_outer| {
        let mut m = pool.tx(|inner| inner.open(x))?;
        *m = 1;
        Ok(())
    })?;
    Ok(())
}
