// A plain `#[repr(C)]` struct of integers and floats, with raw-identifier field names.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Account {
    pub id: u64,
    pub balance: i64,
    pub r#type: u32,
    pub rate: f32,
    pub history: [f64; 4],
}

const _: u64 = Account::LAYOUT;
const _: u32 = Account::TYPE_ID;

fn main() {
    assert_eq!(Account::TYPE_NAME, "Account");
    assert_ne!(Account::TYPE_ID, 0);
    assert_eq!(core::mem::size_of::<Account>(), 56);
}
