// A `Ref` from `pool.get` points into the pool's mapping: the pool cannot be dropped
// while it lives.
use pgl::prelude::*;

fn main() -> pgl::Result<()> {
    let pool = Pool::create("/dev/null/never", &Config::small("ui"))?;
    let x: Oid<u64> = Oid::NULL;
    let r = pool.get(x)?;
    drop(pool);
    println!("{}", *r);
    Ok(())
}
