use pgl::{extendible, Config, Oid, PStr, Persistent, Pool};

#[extendible]
#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    pub key: u32,
    pub value: u32,
    pub next: Oid<Node>,
    #[extension(1, init = |old| PStr::truncating(&format!("n{}", old.key())))]
    pub name: PStr<16>,
    #[extension(2, replaces = key, init = |old| old.key() as u64)]
    pub key64: u64,
}

fn main() {
    use NodeExtFields as _;
    use NodeFields as _;
    let path = std::env::temp_dir().join(format!("pgl-ui-ext-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(&path, &Config::small("ui")).unwrap();
    let o = pool
        .tx(|tx| {
            tx.alloc_ext(NodeData {
                value: 1,
                next: Oid::NULL,
                name: PStr::truncating("a"),
                key64: 3,
            })
        })
        .unwrap();
    pool.tx(|tx| {
        let mut n = tx.ext_mut(o)?;
        n.set_value(2);
        n.set_key(4);
        assert_eq!((*n.value(), *n.key()), (2, 4));
        Ok(())
    })
    .unwrap();
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}
