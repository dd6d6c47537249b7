// A `Mut` points into its transaction's micro-buffer, which the commit frees: returning it
// from the closure must not compile.
use pgl::prelude::*;

fn main() -> pgl::Result<()> {
    let pool = Pool::create("/dev/null/never", &Config::small("ui"))?;
    let x: Oid<u64> = Oid::NULL;
    let m = pool.tx(|tx| tx.open(x))?;
    println!("{}", *m);
    Ok(())
}
