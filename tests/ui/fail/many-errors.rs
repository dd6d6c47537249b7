// Every mistake of one struct is reported in one compile, each once, and the struct's uses
// elsewhere cause no further errors.
use pgl::{Oid, Persistent};

#[derive(Persistent)]
#[repr(C)]
#[pgl(id = 3, name = "acct")]
pub struct Account {
    flag: u8,
    id: u64,
    owner: String,
    #[pgl(skip)]
    active: bool,
    balance: i64,
}

#[derive(Persistent)]
#[repr(C)]
pub struct Bank {
    first: Oid<Account>,
    accounts: [Oid<Account>; 4],
}

fn main() {}
