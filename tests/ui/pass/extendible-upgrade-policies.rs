//! `upgrade = on_read` (the default, spelt out) and `upgrade = on_write` with every group
//! in the reserve, and with none yet.
use pgl::{extendible, Persistent};

#[extendible(reserve = 16, upgrade = on_read)]
#[derive(Persistent)]
#[repr(C)]
pub struct OnRead {
    pub key: u32,
    pub value: u32,
    #[extension(1, init = 0)]
    pub wide: u64,
}

#[extendible(reserve = 16, upgrade = on_write)]
#[derive(Persistent)]
#[repr(C)]
pub struct OnWrite {
    pub key: u32,
    pub value: u32,
    #[extension(1, init = 0)]
    pub wide: u64,
}

#[extendible(reserve = 8, upgrade = on_write)]
#[derive(Persistent)]
#[repr(C)]
pub struct NoGroupsYet {
    pub key: u64,
}

fn main() {
    assert!(!<OnRead as pgl::__private::Extendible>::__UPGRADE_ON_WRITE);
    assert!(<OnWrite as pgl::__private::Extendible>::__UPGRADE_ON_WRITE);
    assert!(<NoGroupsYet as pgl::__private::Extendible>::__UPGRADE_ON_WRITE);
}
