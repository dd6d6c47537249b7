// A private extension field of a public struct gets no public accessor in
// `<Struct>ExtFields`, as a private base field gets none in `<Struct>Fields`.
mod bank {
    use pgl::{extendible, Persistent};

    #[extendible]
    #[derive(Persistent)]
    #[repr(C)]
    pub struct Account {
        pub id: u64,
        #[extension(1, init = 0)]
        pub limit: u64,
        #[extension(1, init = 0)]
        balance: u64,
    }
}

use bank::AccountExtFields;

fn drain(account: &mut pgl::ExtMut<'_, bank::Account>) -> u64 {
    account.set_limit(0);
    account.set_balance(0);
    *account.balance()
}

fn main() {
    let _ = drain;
}
