// A `Place` borrows the handle it came from: it cannot outlive it.
use pgl::prelude::*;

fn main() -> pgl::Result<()> {
    let pool = Pool::create("/dev/null/never", &Config::small("ui"))?;
    let x: Oid<[u64; 4]> = Oid::NULL;
    pool.tx(|tx| {
        let mut p = {
            let mut m = tx.open(x)?;
            m.place()
        };
        p.set([1; 4]);
        Ok(())
    })?;
    Ok(())
}
