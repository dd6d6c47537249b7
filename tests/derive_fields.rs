//! The field accessors `#[derive(Persistent)]` generates (`<Struct>Fields`): getters on every
//! handle, setters and places on writable ones, nested structs and arrays reached in place,
//! and only the written bytes logged.

mod support;

use pgl::{Config, Oid, Persistent, Pool};

#[derive(Persistent, Clone, Copy, Debug, PartialEq, Default)]
#[repr(C)]
pub struct Point {
    pub x: i64,
    pub y: i64,
}

#[derive(Persistent, Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct Shape {
    pub origin: Point,
    pub corners: [Point; 4],
    pub weights: [u32; 1024],
    pub next: Oid<Shape>,
    pub r#type: u64,
}

mod wrapper {
    use super::Point;
    use pgl::Persistent;

    /// A generic struct: its accessor trait is generic too.
    #[derive(Persistent, Clone, Copy)]
    #[repr(C)]
    pub struct Pair<T: Persistent> {
        pub a: T,
        pub b: T,
    }

    /// A private field gets no public accessor; the public one does.
    #[derive(Persistent, Clone, Copy)]
    #[repr(C)]
    pub struct Secretive {
        pub shown: Point,
        hidden: u64,
    }

    impl Secretive {
        pub fn hidden(&self) -> u64 {
            self.hidden
        }
    }
}

use wrapper::{Pair, PairFields, Secretive, SecretiveFields};

fn pool(name: &str) -> (Pool, std::path::PathBuf) {
    let path = support::test_dir().join(format!("pgl-fields-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    (Pool::create(&path, &Config::small(name)).unwrap(), path)
}

fn zero_shape() -> Shape {
    Shape {
        origin: Point::default(),
        corners: [Point::default(); 4],
        weights: [0; 1024],
        next: Oid::NULL,
        r#type: 0,
    }
}

#[test]
fn setters_change_the_field_and_getters_read_it_on_every_handle() {
    let (pool, path) = pool("setget");
    let oid = pool.tx(|tx| tx.alloc(zero_shape())).unwrap();
    pool.tx(|tx| {
        let mut s = tx.open(oid)?;
        s.set_type(9);
        s.origin_mut().set_x(-3);
        s.origin_mut().set_y(4);
        s.set_corners_at(2, Point { x: 7, y: 8 });
        s.corners_mut().at(3).set_y(11);
        s.set_weights_at(1023, 5);
        s.set_next(oid);
        // Getters on the micro-buffer handle see the buffered values.
        assert_eq!(*s.r#type(), 9);
        assert_eq!(s.origin().x, -3);
        assert_eq!(*s.weights_at(1023), 5);
        Ok(())
    })
    .unwrap();

    let r = pool.get(oid).unwrap();
    assert_eq!(*r.r#type(), 9);
    assert_eq!(*r.origin(), Point { x: -3, y: 4 });
    assert_eq!(*r.corners_at(2), Point { x: 7, y: 8 });
    assert_eq!(r.corners_at(3).y(), &11);
    assert_eq!(*r.weights_at(1023), 5);
    let next: Oid<Shape> = *r.next();
    assert_eq!(next, oid, "an Oid field comes back typed");
    drop(r);

    pool.tx(|tx| {
        let s = tx.get(oid)?;
        assert_eq!(*s.origin().y(), 4);
        Ok(())
    })
    .unwrap();
    // A plain value has the getters too.
    let copy: Shape = *pool.get(oid).unwrap();
    assert_eq!(*copy.origin().x(), -3);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_setter_logs_only_the_bytes_of_its_field() {
    let (pool, path) = pool("logged");
    let oid = pool.tx(|tx| tx.alloc(zero_shape())).unwrap();
    let size = std::mem::size_of::<Shape>() as u64;

    let before = pool.stats().bytes_logged;
    pool.tx(|tx| {
        tx.open(oid)?.corners_mut().at(1).set_x(42);
        Ok(())
    })
    .unwrap();
    let one_field = pool.stats().bytes_logged - before;

    // DerefMut marks the whole object; the commit logs from the first changed byte to
    // the last.
    let before = pool.stats().bytes_logged;
    pool.tx(|tx| {
        tx.open(oid)?.corners[1].x = 43;
        Ok(())
    })
    .unwrap();
    let one_through_deref = pool.stats().bytes_logged - before;
    let before = pool.stats().bytes_logged;
    pool.tx(|tx| {
        let mut s = tx.open(oid)?;
        s.origin.x = 1; // the first field
        s.r#type = 2; // the last
        Ok(())
    })
    .unwrap();
    let both_ends = pool.stats().bytes_logged - before;

    assert!(
        one_field < 512,
        "a setter of an 8-byte field logged {one_field} bytes (object: {size} bytes)"
    );
    assert!(
        one_through_deref < 512,
        "one field changed through DerefMut logged {one_through_deref} bytes (object: \
         {size} bytes)"
    );
    assert!(
        both_ends >= 2 * (size - 16),
        "changes at both ends log everything between, in both lane copies ({both_ends} \
         bytes, object: {size} bytes)"
    );
    let s = *pool.get(oid).unwrap();
    assert_eq!((s.corners[1].x, s.origin.x, s.r#type), (43, 1, 2));
    std::fs::remove_file(path).unwrap();
}

#[test]
fn setters_work_on_detached_handles_and_places() {
    let (pool, path) = pool("detached");
    let oid = pool.tx(|tx| tx.alloc(zero_shape())).unwrap();
    let mut d = pool.open_mut(oid).unwrap();
    d.origin_mut().set_x(100);
    d.set_weights_at(0, 1);
    let mut place = d.place();
    place.corners_mut().at(0).set(Point { x: 1, y: 2 });
    d.commit().unwrap();
    let r = pool.get(oid).unwrap();
    assert_eq!(r.origin.x, 100);
    assert_eq!(r.weights[0], 1);
    assert_eq!(r.corners[0], Point { x: 1, y: 2 });
    drop(r);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn generic_structs_and_visibility() {
    let (pool, path) = pool("generic");
    let pair = pool
        .tx(|tx| {
            tx.alloc(Pair {
                a: Point { x: 1, y: 1 },
                b: Point { x: 2, y: 2 },
            })
        })
        .unwrap();
    let secret: Oid<Secretive> = pool.tx(|tx| tx.alloc_zeroed()).unwrap();
    pool.tx(|tx| {
        tx.open(pair)?.b_mut().set_y(20);
        tx.open(secret)?.shown_mut().set_x(5);
        Ok(())
    })
    .unwrap();
    assert_eq!(*pool.get(pair).unwrap().b(), Point { x: 2, y: 20 });
    let s = pool.get(secret).unwrap();
    assert_eq!(s.shown().x, 5);
    assert_eq!(
        s.hidden(),
        0,
        "the inherent method, not a generated accessor"
    );
    drop(s);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn an_aborted_transaction_discards_what_the_setters_wrote() {
    let (pool, path) = pool("abort");
    let oid = pool.tx(|tx| tx.alloc(zero_shape())).unwrap();
    let r: pgl::Result<()> = pool.tx(|tx| {
        tx.open(oid)?.origin_mut().set_x(1);
        Err(pgl::Error::Aborted {
            reason: "test".into(),
        })
    });
    assert!(r.is_err());
    assert_eq!(pool.get(oid).unwrap().origin.x, 0);
    std::fs::remove_file(path).unwrap();
}

#[test]
#[should_panic(expected = "out of bounds")]
fn an_index_past_the_end_panics_like_slice_indexing() {
    /// Removes the pool file when the expected panic unwinds through the test.
    struct RemoveOnDrop(std::path::PathBuf);
    impl Drop for RemoveOnDrop {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let (pool, path) = pool("oob");
    let _cleanup = RemoveOnDrop(path);
    let oid = pool.tx(|tx| tx.alloc(zero_shape())).unwrap();
    let _ = pool.tx(|tx| {
        tx.open(oid)?.set_corners_at(4, Point::default());
        Ok(())
    });
}
