// `#[pgl(id = N)]` fixes the type id; the same id may be used in different modules (the
// derive can only detect duplicates within one module), and in other notations.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
#[pgl(id = 0x5eed)]
pub struct Header(pub u64, pub u64);

mod elsewhere {
    #[derive(pgl::Persistent)]
    #[repr(C)]
    #[pgl(id = 24301)]
    pub struct Header {
        pub magic: u64,
    }
}

#[derive(Persistent)]
#[repr(C)]
#[pgl(id = 7)]
pub struct Generic<T: Persistent> {
    pub value: T,
}

fn main() {
    assert_eq!(Header::TYPE_ID, 0x5eed);
    assert_eq!(elsewhere::Header::TYPE_ID, 0x5eed);
    // A generic struct's explicit id seeds the ids of its instantiations.
    assert_ne!(
        <Generic<u8> as Persistent>::TYPE_ID,
        <Generic<u16> as Persistent>::TYPE_ID
    );
}
