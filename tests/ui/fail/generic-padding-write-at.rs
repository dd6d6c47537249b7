// A generic struct's padding is reported when its layout is computed; writing a value of
// it into another object (`write_at`) computes it too, since the value's bytes are copied
// into the pool, padding included.
use pgl::{Config, Persistent, Pool};

#[derive(Persistent)]
#[repr(C)]
pub struct Tagged<T: Persistent> {
    tag: u8,
    value: T,
}

fn main() {
    let pool = Pool::create("unused.pgl", &Config::small("ui")).unwrap();
    let _ = pool.tx(|tx| {
        let oid = tx.alloc([0u64; 4])?;
        let mut page = tx.open(oid)?;
        page.write_at(0, &Tagged { tag: 1u8, value: 2u64 });
        Ok(())
    });
}
