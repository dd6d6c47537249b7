// A `Ref` borrows the `Pool` value it was read through, even a clone: a temporary clone
// dies at the end of the statement.
use pgl::prelude::*;

fn main() -> pgl::Result<()> {
    let pool = Pool::create("/dev/null/never", &Config::small("ui"))?;
    let x: Oid<u64> = Oid::NULL;
    let r = pool.clone().get(x)?;
    println!("{}", *r);
    Ok(())
}
