//! The checks that can be made on the syntax alone: the kind of item, its `repr`, its
//! generics, and field types that are never persistent.
//!
//! Invariant: each mistake is reported once, at the token that shows it, with a message that
//! says how to fix it; what cannot be decided from syntax (sizes, padding, whether a named
//! type implements `Persistent`) is left to the type-level checks of `layout`.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::{GenericParam, Type, TypeParamBound, WherePredicate};

use crate::ast::{Container, Data, Field};
use crate::ctxt::Ctxt;

/// What the syntactic checks found, for `expand` to decide what it may generate.
pub(crate) struct Verdict {
    /// Whether the struct's shape is sound enough for the layout checks to mean anything:
    /// a non-empty struct, a stable repr, valid generics, and only sized field types.
    pub(crate) layout_checkable: bool,
    /// For each field, whether its type was rejected (and an error reported).
    pub(crate) rejected: Vec<bool>,
}

impl Verdict {
    /// The index of the first rejected field, or the number of fields. The layout of the
    /// fields before it does not depend on any rejected type.
    pub(crate) fn first_rejected(&self) -> usize {
        self.rejected
            .iter()
            .position(|r| *r)
            .unwrap_or(self.rejected.len())
    }
}

/// Runs every syntactic check, reporting into `cx`.
pub(crate) fn check(cx: &Ctxt, cont: &Container<'_>) -> Verdict {
    let mut checkable = true;
    let fields = match &cont.data {
        Data::Enum(span) => {
            cx.error_at(
                *span,
                "`#[derive(Persistent)]` cannot be used on enums: a pool file may hold any \
                 bytes, and not every bit pattern is a valid discriminant; use a `#[repr(C)]` \
                 struct with an integer field that says which variant it holds",
            );
            return Verdict {
                layout_checkable: false,
                rejected: Vec::new(),
            };
        }
        Data::Union(span) => {
            cx.error_at(
                *span,
                "`#[derive(Persistent)]` cannot be used on unions: nothing records which field \
                 a union holds; use a `#[repr(C)]` struct with a byte array (`[u8; N]`) and \
                 convert it explicitly",
            );
            return Verdict {
                layout_checkable: false,
                rejected: Vec::new(),
            };
        }
        Data::Struct(fields) => fields,
    };

    if fields.is_empty() {
        cx.error_spanned_by(
            cont.ident,
            format!(
                "`{}` has no fields, so it is zero-sized, but a persistent object must occupy \
                 at least one byte: add a field",
                cont.name
            ),
        );
        checkable = false;
    }
    checkable &= check_repr(cx, cont);
    checkable &= check_generics(cx, cont);

    let mut rejected = Vec::with_capacity(fields.len());
    for field in fields {
        match check_field_type(field) {
            None => rejected.push(false),
            Some(rejection) => {
                if let Some(message) = rejection.message {
                    cx.error_spanned_by(rejection.tokens, message);
                }
                rejected.push(true);
                checkable &= !rejection.is_unsized;
            }
        }
    }
    Verdict {
        layout_checkable: checkable,
        rejected,
    }
}

fn check_repr(cx: &Ctxt, cont: &Container<'_>) -> bool {
    let repr = &cont.attrs.repr;
    if repr.is_stable() {
        return true;
    }
    match repr.rust {
        Some(span) => cx.error_at(
            span,
            "`repr(Rust)` lets the compiler reorder fields from one build to the next, but a \
             pool file outlives builds: use `#[repr(C)]`",
        ),
        None => cx.error_spanned_by(
            cont.ident,
            format!(
                "`{}` needs `#[repr(C)]`: without it the compiler may reorder its fields from \
                 one build to the next, but a pool file outlives builds; add `#[repr(C)]` above \
                 the struct (or `#[repr(transparent)]` for a one-field wrapper)",
                cont.name
            ),
        ),
    }
    false
}

fn check_generics(cx: &Ctxt, cont: &Container<'_>) -> bool {
    let mut ok = true;
    for param in &cont.generics.params {
        match param {
            GenericParam::Lifetime(def) => {
                cx.error_spanned_by(
                    &def.lifetime,
                    format!(
                        "a persistent type cannot borrow, so it takes no lifetime parameters: \
                         remove `{}` and store an `Oid<T>` instead of a reference",
                        def.lifetime
                    ),
                );
                ok = false;
            }
            GenericParam::Type(param) => {
                if !has_persistent_bound(cont.generics, param) {
                    cx.error_spanned_by(
                        &param.ident,
                        format!(
                            "type parameter `{0}` must be bounded by `Persistent`, so that \
                             every field that uses it is persistent: write \
                             `{0}: pgl::Persistent`",
                            param.ident
                        ),
                    );
                    ok = false;
                }
            }
            GenericParam::Const(_) => {}
        }
    }
    ok
}

fn is_persistent_bound(bound: &TypeParamBound) -> bool {
    match bound {
        TypeParamBound::Trait(bound) => {
            matches!(bound.modifier, syn::TraitBoundModifier::None)
                && bound
                    .path
                    .segments
                    .last()
                    .is_some_and(|s| s.ident == "Persistent" && s.arguments.is_none())
        }
        _ => false,
    }
}

fn has_persistent_bound(generics: &syn::Generics, param: &syn::TypeParam) -> bool {
    if param.bounds.iter().any(is_persistent_bound) {
        return true;
    }
    let Some(where_clause) = &generics.where_clause else {
        return false;
    };
    where_clause.predicates.iter().any(|pred| match pred {
        WherePredicate::Type(pred) => {
            matches!(&pred.bounded_ty, Type::Path(p) if p.qself.is_none() && p.path.is_ident(&param.ident))
                && pred.bounds.iter().any(is_persistent_bound)
        }
        _ => false,
    })
}

/// Why a field type is never persistent.
struct Rejection {
    /// The offending (part of the) type, for the span.
    tokens: TokenStream,
    /// The message; `None` where rustc reports the mistake itself.
    message: Option<String>,
    /// Whether the type is unsized, so that no layout of the struct can be computed.
    is_unsized: bool,
}

impl Rejection {
    fn new(tokens: impl ToTokens, message: impl Into<String>) -> Self {
        Self {
            tokens: tokens.into_token_stream(),
            message: Some(message.into()),
            is_unsized: false,
        }
    }

    fn unsized_(tokens: impl ToTokens, message: impl Into<String>) -> Self {
        Self {
            is_unsized: true,
            ..Self::new(tokens, message)
        }
    }
}

const HEAP: &str = "which does not survive a restart";

fn check_field_type(field: &Field<'_>) -> Option<Rejection> {
    check_type(field.ty)
}

fn check_type(ty: &Type) -> Option<Rejection> {
    match ty {
        Type::Array(array) => check_type(&array.elem),
        Type::Paren(inner) => check_type(&inner.elem),
        Type::Group(inner) => check_type(&inner.elem),
        Type::Reference(_) => Some(Rejection::new(
            ty,
            "references cannot be stored in a pool: an address means nothing once the pool \
             is reopened; store an `Oid<T>` (the pool offset of a persistent object) instead",
        )),
        Type::Ptr(_) => Some(Rejection::new(
            ty,
            "raw pointers cannot be stored in a pool: an address means nothing once the pool \
             is reopened; store an `Oid<T>` (the pool offset of a persistent object) instead",
        )),
        Type::BareFn(_) => Some(Rejection::new(
            ty,
            "function pointers cannot be stored in a pool: code addresses change from one run \
             to the next; store an integer that selects the function instead",
        )),
        Type::TraitObject(_) => Some(Rejection::unsized_(
            ty,
            "trait objects cannot be stored in a pool: they are unsized and carry a vtable \
             pointer; store a concrete persistent type, or an `Oid<T>` of one",
        )),
        Type::Slice(_) => Some(Rejection::unsized_(
            ty,
            "a slice is unsized and cannot be stored inline: use a fixed-size array `[T; N]`",
        )),
        Type::Never(_) => Some(Rejection::new(
            ty,
            "`!` has no values and cannot be stored: remove the field",
        )),
        Type::Tuple(tuple) if tuple.elems.is_empty() => Some(Rejection::new(
            ty,
            "`()` is zero-sized and stores nothing: remove the field",
        )),
        Type::Tuple(_) => Some(Rejection::new(
            ty,
            "tuples have no guaranteed layout: use a `#[repr(C)]` struct that derives \
             `Persistent`, or an array",
        )),
        // rustc rejects these in a field itself; only keep the layout checks away from them.
        Type::ImplTrait(_) | Type::Infer(_) => Some(Rejection {
            tokens: ty.into_token_stream(),
            message: None,
            is_unsized: true,
        }),
        Type::Path(path) if path.qself.is_none() => check_path(ty, &path.path),
        _ => None,
    }
}

/// Whether a path may name the standard library's item of its last segment: a bare name,
/// or a path through `std`, `core` or `alloc`. A user's own `my::Vec` is left alone.
fn may_be_std(path: &syn::Path) -> bool {
    path.segments.len() == 1
        || path
            .segments
            .first()
            .is_some_and(|s| s.ident == "std" || s.ident == "core" || s.ident == "alloc")
}

fn check_path(ty: &Type, path: &syn::Path) -> Option<Rejection> {
    if !may_be_std(path) {
        return None;
    }
    let last = path.segments.last()?;
    let name = last.ident.to_string();
    let message = match name.as_str() {
        "bool" if last.arguments.is_none() => "`bool` is not valid for every bit pattern (only 0 \
             and 1 are), but a pool file may hold any bytes: use `pgl::PBool`"
            .to_owned(),
        "char" if last.arguments.is_none() => "`char` is not valid for every bit pattern \
             (surrogates and values above 0x10FFFF are not), but a pool file may hold any \
             bytes: store a `u32` and convert it with `char::from_u32`"
            .to_owned(),
        "usize" | "isize" if last.arguments.is_none() => format!(
            "`{name}` is 4 bytes on some targets and 8 on others, so the pool file would not be \
             portable: use `{}64` (or `{}32`)",
            &name[..1],
            &name[..1]
        ),
        "str" if last.arguments.is_none() => {
            return Some(Rejection::unsized_(
                ty,
                "`str` is unsized and cannot be stored inline: use `pgl::PStr<N>`, a \
                 fixed-capacity string",
            ))
        }
        "String" => format!(
            "`String` keeps its bytes in the process heap, {HEAP}: use `pgl::PStr<N>`, a \
             fixed-capacity string stored inline"
        ),
        "Vec" => format!(
            "`Vec` keeps its elements in the process heap, {HEAP}: use a fixed-size array \
             `[T; N]` (`pgl::PBytes<N>` for bytes), or an `Oid<T>` of an array in the pool"
        ),
        "Box" | "Rc" | "Arc" => format!(
            "`{name}` points into the process heap, {HEAP}: allocate the value in the pool and \
             store its `Oid<T>`"
        ),
        "VecDeque" | "LinkedList" | "HashMap" | "HashSet" | "BTreeMap" | "BTreeSet"
        | "BinaryHeap" => format!(
            "`{name}` keeps its entries in the process heap, {HEAP}: build the collection in \
             the pool from persistent structs linked by `Oid<T>`"
        ),
        "Option" => "`Option` is not valid for every bit pattern (its discriminant is checked), \
             but a pool file may hold any bytes: use an `Oid<T>`, whose null value means none, \
             or the value and a separate `pgl::PBool` flag"
            .to_owned(),
        "Result" => "`Result` is an enum, not valid for every bit pattern, but a pool file may \
             hold any bytes: store a status code in an integer field and the value beside it"
            .to_owned(),
        "PhantomData" => "`PhantomData` stores nothing and is not persistent: remove the field \
             (a type parameter can appear in a field as `Oid<T>`)"
            .to_owned(),
        "UnsafeCell" | "RefCell" => format!(
            "`{name}` has interior mutability, but a persistent object changes only inside a \
             transaction: store the value itself"
        ),
        _ if name.starts_with("NonZero") => format!(
            "`{name}` is not valid for every bit pattern (0 is not), but a pool file may hold \
             any bytes: store the plain integer and check it when reading"
        ),
        _ if name.starts_with("Atomic") => format!(
            "`{name}` has interior mutability, but a persistent object changes only inside a \
             transaction: use the plain integer type"
        ),
        // Generic arguments are not judged here: `Oid<T>` is checked by the type system.
        _ => return None,
    };
    Some(Rejection::new(ty, message))
}
