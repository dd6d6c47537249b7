// A `Read` holds a buffer borrow or a lock that ends with its transaction.
use pgl::prelude::*;

fn main() -> pgl::Result<()> {
    let pool = Pool::create("/dev/null/never", &Config::small("ui"))?;
    let x: Oid<u64> = Oid::NULL;
    let r = pool.tx(|tx| tx.get(x))?;
    println!("{}", *r);
    Ok(())
}
