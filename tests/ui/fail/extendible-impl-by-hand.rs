// `Extendible` is implemented by `#[extendible]`: the runtime runs its glue where extension
// groups may be opened under their owner's lock alone. A safe hand-written impl could open
// another owner's group there (its type named through `<Node as Extendible>::Refs`) and
// change it under that owner's readers; the trait is `unsafe` to implement.
use std::marker::PhantomData;

use pgl::__private::{Extendible, ExtendibleData, GroupRef, Tx};
use pgl::{extendible, Oid, Persistent};

#[extendible]
#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    pub key: u64,
    #[extension(1, init = 0)]
    pub wide: u64,
}

#[derive(Persistent)]
#[repr(C)]
pub struct Evil {
    pub x: u64,
}

pub struct EvilData {
    victim_group: u64,
}

impl ExtendibleData for EvilData {
    type Struct = Evil;
}

fn group_type<'r, G: Persistent>(_: fn(<Node as Extendible>::Refs<'r>) -> GroupRef<'r, G>) -> PhantomData<G> {
    PhantomData
}

fn open_as<G: Persistent>(tx: &Tx<'_>, off: u64, _: PhantomData<G>) -> pgl::Result<()> {
    tx.open(Oid::<G>::from_raw(off)).map(drop)
}

impl Extendible for Evil {
    type Data = EvilData;
    type Reads<'a> = ();
    type Muts<'a> = ();
    type Refs<'a> = ();
    type Places<'a> = ();
    const GROUPS: usize = 0;
    const GROUP_KEYS: &'static [(u32, u64)] = &[];
    fn __link(&self) -> u64 {
        0
    }
    fn __next(_: &Tx<'_>, _: usize, _: u64) -> pgl::Result<u64> {
        Ok(0)
    }
    fn __upgrade(_: &Tx<'_>, _: usize, _: &Self, _: &[u64]) -> pgl::Result<u64> {
        Ok(0)
    }
    fn __set_next(_: &Tx<'_>, _: usize, _: u64, _: u64) -> pgl::Result<()> {
        Ok(())
    }
    fn __alloc(tx: &Tx<'_>, data: EvilData) -> pgl::Result<Oid<Self>> {
        // Runs in the group write scope, holding no owner's lock (`tx.alloc_ext`).
        open_as(tx, data.victim_group, group_type(|r| r.g1))?;
        tx.alloc(Evil { x: 1 })
    }
    fn __reads<'a>(_: &'a Tx<'_>, _: u64) -> pgl::Result<Option<()>> {
        Ok(Some(()))
    }
    fn __muts<'a>(_: &'a Tx<'_>, _: u64) -> pgl::Result<Option<()>> {
        Ok(Some(()))
    }
    fn __refs_of_reads(_: &()) {}
    fn __refs_of_muts(_: &()) {}
    fn __places(_: &mut ()) {}
}

fn main() {}
