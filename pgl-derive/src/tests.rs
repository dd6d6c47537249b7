//! Snapshots of the expansion of each input shape, pretty-printed, and unit tests of the
//! error gathering. The compile-time behaviour of the generated code is pinned by the
//! trybuild tests in the workspace's `tests/ui`.

use proc_macro2::TokenStream;
use quote::quote;

use crate::expand::persistent::derive;

/// The derive's output for `input`, pretty-printed.
fn expand(input: TokenStream) -> String {
    let input: syn::DeriveInput = syn::parse2(input).expect("test input parses");
    let output = derive(&input);
    let file: syn::File = syn::parse2(output).expect("expansion parses as items");
    prettyplease::unparse(&file)
}

/// The messages of the `compile_error!`s in the derive's output for `input`.
fn errors(input: TokenStream) -> Vec<String> {
    let input: syn::DeriveInput = syn::parse2(input).expect("test input parses");
    let file: syn::File = syn::parse2(derive(&input)).expect("expansion parses as items");
    file.items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Macro(m) if m.mac.path.segments.last()?.ident == "compile_error" => {
                let lit: syn::LitStr = m.mac.parse_body().ok()?;
                Some(lit.value())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn plain_struct() {
    insta::assert_snapshot!(expand(quote! {
        #[derive(Persistent)]
        #[repr(C)]
        pub struct Account {
            pub id: u64,
            pub balance: i64,
            pub flags: u32,
            pub rate: f32,
        }
    }));
}

#[test]
fn nested_struct() {
    insta::assert_snapshot!(expand(quote! {
        #[derive(Persistent)]
        #[repr(C)]
        pub struct Segment {
            pub from: Point,
            pub to: Point,
        }
    }));
}

#[test]
fn arrays() {
    insta::assert_snapshot!(expand(quote! {
        #[derive(Persistent)]
        #[repr(C)]
        pub struct Page {
            pub len: u32,
            pub crc: u32,
            pub bytes: [u8; 4088],
            pub grid: [[u16; 4]; 4],
        }
    }));
}

#[test]
fn oid_fields() {
    insta::assert_snapshot!(expand(quote! {
        #[derive(Persistent)]
        #[repr(C)]
        pub struct Node {
            pub key: u64,
            pub next: Oid<Self>,
            pub children: [Oid<Node>; 2],
        }
    }));
}

#[test]
fn generic() {
    insta::assert_snapshot!(expand(quote! {
        #[derive(Persistent)]
        #[repr(C)]
        pub struct Slot<K: Persistent, V, const N: usize>
        where
            V: pgl::Persistent,
        {
            pub keys: [K; N],
            pub value: Oid<V>,
        }
    }));
}

#[test]
fn a_plain_struct_cannot_name_a_field_like_an_extension_link() {
    // With `#[extendible]`'s type id, it would have the layout fingerprint of its base and
    // open its objects as a type whose link pgl does not keep.
    let e = errors(quote! {
        #[derive(Persistent)]
        #[repr(C)]
        #[pgl(id = 0x5eed_00c1)]
        pub struct Twin {
            pub a: u64,
            pub __pgl_ext: ::pgl::ExtLink,
        }
    });
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("reserved for the links"), "{e:?}");
    let e = errors(quote! {
        #[derive(Persistent)]
        #[repr(C)]
        pub struct GroupTwin {
            pub b: u64,
            __pgl_next: ::pgl::ExtLink,
        }
    });
    assert_eq!(e.len(), 1, "{e:?}");
}

#[test]
fn explicit_id() {
    insta::assert_snapshot!(expand(quote! {
        #[derive(Persistent)]
        #[repr(C)]
        #[pgl(id = 0x5eed)]
        pub struct Header(u64, u64);
    }));
}

#[test]
fn packed() {
    insta::assert_snapshot!(expand(quote! {
        #[derive(Persistent)]
        #[repr(C, packed)]
        pub struct Wire {
            pub tag: u32,
            pub len: u16,
            pub kind: u8,
        }
    }));
}

#[test]
fn rejected_field_keeps_checks_of_the_fields_before_it() {
    insta::assert_snapshot!(expand(quote! {
        #[derive(Persistent)]
        #[repr(C)]
        pub struct Mixed {
            pub a: u8,
            pub b: u32,
            pub c: bool,
            pub d: u64,
        }
    }));
}

#[test]
fn unusable_input_gets_a_stub() {
    insta::assert_snapshot!(expand(quote! {
        #[derive(Persistent)]
        pub enum Kind { A, B }
    }));
}

#[test]
fn all_errors_of_a_struct_are_reported_at_once() {
    let errors = errors(quote! {
        #[derive(Persistent)]
        #[pgl(id = 0, colour = "red")]
        pub struct Bad<'a, T> {
            a: &'a u8,
            b: Vec<T>,
            #[pgl(skip)]
            c: [bool; 2],
            d: u64,
        }
    });
    let expected = [
        "type id 0 is reserved",
        "unknown `pgl` attribute `colour`",
        "unknown `pgl` field attribute `skip`",
        "`Bad` needs `#[repr(C)]`",
        "remove `'a`",
        "type parameter `T` must be bounded by `Persistent`",
        "references cannot be stored",
        "`Vec` keeps its elements",
        "`bool` is not valid",
    ];
    assert_eq!(errors.len(), expected.len(), "{errors:#?}");
    for (error, start) in errors.iter().zip(expected) {
        assert!(error.contains(start), "{error:?} should contain {start:?}");
    }
}

#[test]
fn accepted_shapes_report_nothing() {
    for input in [
        quote!(
            #[repr(C)]
            struct A {
                a: u64,
            }
        ),
        quote!(
            #[repr(transparent)]
            struct B(u32);
        ),
        quote!(
            #[repr(C, align(8))]
            struct C {
                a: [u8; 8],
            }
        ),
        quote!(
            #[repr(C)]
            struct D<T: Persistent, const N: usize>([T; N]);
        ),
        quote!(
            #[repr(C)]
            #[pgl(id = 7)]
            struct E {
                r#type: u16,
                r#match: u16,
            }
        ),
        quote!(
            #[repr(C)]
            struct F {
                my: my::Vec,
                o: Option2,
            }
        ),
    ] {
        assert_eq!(errors(input.clone()), Vec::<String>::new(), "{input}");
    }
}

#[test]
fn std_paths_are_recognised_but_user_paths_are_not() {
    let errors = errors(quote! {
        #[repr(C)]
        struct S { a: std::vec::Vec<u8>, b: ::alloc::string::String, c: crate::Vec, d: self::String }
    });
    assert_eq!(errors.len(), 2, "{errors:#?}");
}

#[test]
fn bad_id_values() {
    for (attr, message) in [
        (quote!(#[pgl(id = "x")]), "expected an integer literal"),
        (quote!(#[pgl(id = 4294967296)]), "out of range"),
        (quote!(#[pgl(id = 5u64)]), "without a suffix"),
        (quote!(#[pgl(id = 1, id = 2)]), "duplicate `id`"),
        (quote!(#[pgl(id)]), "expected `=`"),
        (quote!(#[pgl = 3]), "expected `#[pgl(id = N)]`"),
    ] {
        let errors = errors(quote!(#attr #[repr(C)] struct S { a: u64 }));
        assert_eq!(errors.len(), 1, "{attr}: {errors:#?}");
        assert!(errors[0].contains(message), "{attr}: {errors:#?}");
    }
}

/// `#[extendible]`'s output for `input`, pretty-printed (the derive it leaves on the
/// structs is not expanded).
fn expand_extendible(args: TokenStream, input: TokenStream) -> String {
    let output = crate::expand::extendible::expand(args, input);
    let file: syn::File = syn::parse2(output).expect("expansion parses as items");
    prettyplease::unparse(&file)
}

#[test]
fn extendible_two_groups_with_a_replaced_field() {
    insta::assert_snapshot!(expand_extendible(
        quote!(),
        quote! {
            #[derive(Persistent)]
            #[repr(C)]
            pub struct Node {
                pub key: u32,
                pub value: u32,
                #[extension(1, init = |old| old.value() as u64)]
                pub total: u64,
                #[extension(2, replaces = key, init = |old| old.key() as u64)]
                pub key64: u64,
            }
        }
    ));
}

#[test]
fn extendible_base_only_with_a_pinned_fingerprint() {
    insta::assert_snapshot!(expand_extendible(
        quote!(base = 0x1234),
        quote! {
            #[derive(Persistent)]
            #[repr(C)]
            pub struct Counter {
                pub hits: u64,
            }
        }
    ));
}

#[test]
fn extendible_with_a_reserve() {
    insta::assert_snapshot!(expand_extendible(
        quote!(reserve = 16),
        quote! {
            #[derive(Persistent)]
            #[repr(C)]
            pub struct Node {
                pub key: u32,
                pub value: u32,
                #[extension(1, replaces = key, init = |old| old.key() as u64)]
                pub key64: u64,
            }
        }
    ));
}

#[test]
fn extendible_upgraded_on_write() {
    insta::assert_snapshot!(expand_extendible(
        quote!(reserve = 8, upgrade = on_write),
        quote! {
            #[derive(Persistent)]
            #[repr(C)]
            pub struct Node {
                pub key: u32,
                pub value: u32,
                #[extension(1, replaces = key, init = |old| old.key() as u64)]
                pub key64: u64,
            }
        }
    ));
}

#[test]
fn only_upgrade_on_write_sets_the_policy_and_checks_the_reserve() {
    let node = quote! {
        #[derive(Persistent)]
        #[repr(C)]
        pub struct Node {
            pub key: u64,
            #[extension(1, init = 0)]
            pub tag: u32,
        }
    };
    for (args, on_write) in [
        (quote!(reserve = 8), false),
        (quote!(reserve = 8, upgrade = on_read), false),
        (quote!(reserve = 8, upgrade = on_write), true),
    ] {
        let out = expand_extendible(args.clone(), node.clone());
        assert_eq!(
            out.contains("const __UPGRADE_ON_WRITE: bool = true;"),
            on_write,
            "{args}: {out}"
        );
        assert_eq!(out.contains("all_inline"), on_write, "{args}");
    }
}

#[test]
fn a_reserve_reaches_the_persistent_impl_and_the_layout() {
    let out = expand(quote! {
        #[repr(C)]
        #[pgl(__extendible)]
        #[pgl(__reserve = 24)]
        pub struct Node {
            pub key: u64,
            __pgl_ext: ::pgl::__private::ExtLink,
        }
    });
    assert!(out.contains("const __RESERVE: usize = 24;"), "{out}");
    assert!(
        out.contains("b\"pgl::reserve\""),
        "the reserve is in the fingerprint: {out}"
    );
    let hand = errors(quote! {
        #[repr(C)]
        #[pgl(__reserve = 24)]
        pub struct Plain {
            pub key: u64,
        }
    });
    assert!(
        hand.iter()
            .any(|e| e.contains("set by `#[extendible(reserve = N)]`")),
        "{hand:?}"
    );
}
