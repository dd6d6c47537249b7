//! `#[derive(Persistent)]`: an `unsafe impl Persistent` whose safety conditions are proved
//! by the checks of `check` (syntax) and `layout` (types), all inside one
//! `const _: () = { ... };`.
//!
//! Invariant: the real impl is emitted only with every check beside it, so that a program
//! that builds never holds an unchecked impl; when some check failed, the impl is emitted
//! under deferred bounds (see `fallback`) so that the errors do not cascade.

use proc_macro2::{Ident, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::{DeriveInput, GenericParam, LitInt};

use crate::ast::{Container, Data, Field};
use crate::check::{self, Verdict};
use crate::ctxt::Ctxt;
use crate::expand::handle;
use crate::extension::{reserved_name_message, RESERVED_PREFIX};
use crate::fallback;
use crate::layout::Layout;

/// Expands `#[derive(Persistent)]` on `input`: the generated items, or the errors (all of
/// them) followed by a stub.
pub(crate) fn derive(input: &DeriveInput) -> TokenStream {
    if let Some(attr) = extendible_after_derive(input) {
        // `#[extendible]` below the derive rewrites the struct after the derive saw it: any
        // code generated from the fields as written would not match the struct. One error,
        // and the stub (the `#[extension]` attributes are not reported again).
        let discarded = Ctxt::new();
        let cont = Container::from_ast(&discarded, input);
        drop(discarded.into_error());
        let error = syn::Error::new_spanned(
            attr,
            "`#[extendible]` must come before `#[derive(Persistent)]`: it rewrites the struct \
             that the derive then reads; move `#[extendible]` above the derive",
        );
        return fallback::expand(&cont, error);
    }
    let cx = Ctxt::new();
    let cont = Container::from_ast(&cx, input);
    let verdict = check::check(&cx, &cont);
    if let Data::Struct(fields) = &cont.data {
        handle::check(&cx, &cont, fields);
        // The hidden key makes `Tx::free` follow the last 8 bytes as a link: only the
        // struct `#[extendible]` rewrote (which ends with its link) may carry it.
        let linked = fields.last().is_some_and(|f| f.name == "__pgl_ext");
        if let Some(attr) = cont.attrs.extendible.as_ref().filter(|_| !linked) {
            cx.error_spanned_by(
                attr,
                "`#[pgl(__extendible)]` is set by `#[extendible]`, not by hand: remove it, \
                 and put `#[extendible]` above `#[derive(Persistent)]` if the struct is to \
                 gain fields later",
            );
        }
        if let Some(n) = cont.attrs.reserve.as_ref().filter(|_| !linked) {
            cx.error_spanned_by(
                n,
                "`#[pgl(__reserve = ..)]` is set by `#[extendible(reserve = N)]`, not by hand: \
                 remove it",
            );
        }
        // The links' names are in the layout fingerprint: a struct of the program with a
        // field of the same name could have the type id and fingerprint of an
        // `#[extendible]` base or group, open its objects and write their links (which the
        // runtime keeps only through the generated types), sharing another object's groups.
        // Only the link `#[extendible]` appended (the last field of a base or group) may
        // have such a name; the user's own fields of those structs are checked too.
        let link = if cont.attrs.extendible.is_some() {
            Some("__pgl_ext")
        } else if cont.attrs.group_of.is_some() {
            Some("__pgl_next")
        } else {
            None
        };
        for (i, f) in fields.iter().enumerate() {
            let is_link = i + 1 == fields.len() && link == Some(f.name.as_str());
            if f.name.starts_with(RESERVED_PREFIX) && !is_link {
                cx.error_spanned_by(f.tokens(), reserved_name_message(&f.name));
            }
        }
    }
    let guard = type_id_guard(&cont);
    let error = cx.into_error();
    let body = match &cont.data {
        Data::Struct(fields) if verdict.layout_checkable => expand(&cont, fields, &verdict, error),
        _ => fallback::expand(
            &cont,
            error.unwrap_or_else(|| {
                syn::Error::new_spanned(cont.ident, "`#[derive(Persistent)]` cannot be used here")
            }),
        ),
    };
    quote!(#guard #body)
}

/// An `#[extendible]` attribute among the derive's input attributes: it was written below
/// `#[derive(Persistent)]` (above it, it would have run first and removed itself).
fn extendible_after_derive(input: &DeriveInput) -> Option<&syn::Attribute> {
    input.attrs.iter().find(|a| {
        a.path()
            .segments
            .last()
            .is_some_and(|s| s.ident == "extendible")
    })
}

fn expand(
    cont: &Container<'_>,
    fields: &[Field<'_>],
    verdict: &Verdict,
    error: Option<syn::Error>,
) -> TokenStream {
    let layout = Layout::new(cont, fields, verdict);
    let ident = cont.ident;
    let name = &cont.name;
    let (impl_generics, ty_generics, where_clause) = cont.generics.split_for_impl();
    let where_clause = match &error {
        Some(_) => fallback::deferred_where_clause(cont),
        None => persistent_params(cont, where_clause),
    };
    let type_id = type_id(cont);
    let fingerprint = layout.fingerprint();
    let field_traits = layout.field_traits();
    let static_checks = layout.static_checks();
    let accessors = match error {
        None => handle::expand(cont, fields, &layout.field_tys),
        Some(_) => TokenStream::new(),
    };
    let owns_tail = cont.attrs.extendible.is_some().then(|| {
        quote!(
            const __OWNS_TAIL: bool = true;
        )
    });
    // A reserve is part of the layout: objects of another reserve size are another type.
    let (reserve, fingerprint) = match &cont.attrs.reserve {
        Some(n) => (
            quote!(const __RESERVE: usize = #n;),
            quote!(::pgl::__private::mix64(
                { #fingerprint },
                ::pgl::__private::fnv1a64(b"pgl::reserve", #n as u64),
            )),
        ),
        None => (TokenStream::new(), fingerprint),
    };
    let group = cont.attrs.group_of.is_some().then(|| {
        quote!(
            const __GROUP: bool = true;
        )
    });
    let error = error.map(syn::Error::into_compile_error);
    quote! {
        #error
        // The checks name the user's fields: their deprecations are the user's to lint.
        #[allow(unused_qualifications, clippy::use_self, deprecated)]
        const _: () = {
            #field_traits
            #static_checks
            #[automatically_derived]
            unsafe impl #impl_generics ::pgl::__private::Persistent for #ident #ty_generics
            #where_clause
            {
                const TYPE_ID: u32 = #type_id;
                const LAYOUT: u64 = { #fingerprint };
                const TYPE_NAME: &'static str = #name;
                #owns_tail
                #reserve
                #group
            }
        };
        #accessors
    }
}

/// The impl's where clause: the struct's, plus `T: Persistent` (pgl's) for each type
/// parameter. `check` accepts any bound whose path ends in `Persistent`, which may be
/// another trait of that name: the impl then still holds only where the fields are
/// persistent, instead of failing with errors about `'static` and `Send`.
fn persistent_params(cont: &Container<'_>, where_clause: Option<&syn::WhereClause>) -> TokenStream {
    let params = cont.generics.params.iter().filter_map(|p| match p {
        GenericParam::Type(t) => Some(&t.ident),
        _ => None,
    });
    let predicates = crate::fallback::where_predicates(where_clause);
    quote! {
        where
            #predicates
            #(#params: ::pgl::__private::Persistent,)*
    }
}

/// `TYPE_ID`: the explicit `#[pgl(id = N)]`, or a hash of `module_path!()::Name`. A generic
/// struct mixes in the ids of its type arguments and the values of its const arguments,
/// so that each instantiation has its own id. The local is `__pgl_h`, a name no user
/// constant or const parameter has (a `let` pattern would resolve to it).
fn type_id(cont: &Container<'_>) -> TokenStream {
    let path_hash = || {
        let suffix = format!("::{}", cont.name);
        quote! {
            ::pgl::__private::fnv1a64(
                ::core::concat!(::core::module_path!(), #suffix).as_bytes(),
                0,
            )
        }
    };
    if let Some((base, k)) = &cont.attrs.group_of {
        return quote! {
            ::pgl::__private::group_type_id(
                <#base as ::pgl::__private::Persistent>::TYPE_ID,
                #k,
            )
        };
    }
    if !cont.is_generic() {
        return match &cont.attrs.id {
            Some(id) => LitInt::new(&id.value.to_string(), id.span).into_token_stream(),
            None => {
                let hash = path_hash();
                quote!(::pgl::__private::fold_type_id(#hash))
            }
        };
    }
    let seed = match &cont.attrs.id {
        Some(id) => LitInt::new(&format!("{}u64", id.value), id.span).into_token_stream(),
        None => path_hash(),
    };
    let mixes = cont.generics.params.iter().filter_map(|param| match param {
        GenericParam::Type(t) => {
            let t = &t.ident;
            Some(quote! {
                let __pgl_h = ::pgl::__private::mix64(
                    __pgl_h,
                    <#t as ::pgl::__private::Persistent>::TYPE_ID as u64,
                );
            })
        }
        GenericParam::Const(c) => {
            let c = &c.ident;
            Some(quote!(let __pgl_h = ::pgl::__private::mix64(__pgl_h, #c as u64);))
        }
        GenericParam::Lifetime(_) => None,
    });
    quote! {{
        let __pgl_h: u64 = #seed;
        #(#mixes)*
        ::pgl::__private::fold_type_id(__pgl_h)
    }}
}

/// For an explicit `#[pgl(id = N)]`, a hidden item named after the id in the struct's
/// module, so that two structs of one module with the same explicit id fail to compile
/// ("the name `__PGL_TYPE_ID_N` is defined multiple times", pointing at both ids).
/// Duplicates in different modules are not detectable by a derive.
fn type_id_guard(cont: &Container<'_>) -> TokenStream {
    let Some(id) = &cont.attrs.id else {
        return TokenStream::new();
    };
    let guard = Ident::new(&format!("__PGL_TYPE_ID_{}", id.value), id.span);
    quote_spanned! {id.span=>
        #[doc(hidden)]
        #[allow(dead_code, non_upper_case_globals)]
        const #guard: () = ();
    }
}
