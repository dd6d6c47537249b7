// Nor may a `Mut` be kept in a variable that outlives the closure.
use pgl::prelude::*;

fn main() -> pgl::Result<()> {
    let pool = Pool::create("/dev/null/never", &Config::small("ui"))?;
    let x: Oid<u64> = Oid::NULL;
    let mut kept = None;
    pool.tx(|tx| {
        kept = Some(tx.open(x)?);
        Ok(())
    })?;
    println!("{}", **kept.as_ref().unwrap());
    Ok(())
}
