//! What the derive emits when the input is unusable: the errors, plus a stub impl.
//!
//! Invariant: the stub makes the type `Persistent` for the rest of the crate, so that the
//! mistakes reported for the struct are the only errors, not a cascade at every use of it.
//! Its bounds sit under a `for<'__pgl>` binder, which keeps rustc from rejecting them as
//! trivially false (rust-lang/rust#48214), so the stub compiles whatever the struct holds.
//! The stub is never reachable in a program that builds: the errors fail the build.

use proc_macro2::TokenStream;
use quote::quote;

use crate::ast::Container;

/// The errors of `cont` and a stub impl of `Persistent` for it.
pub(crate) fn expand(cont: &Container<'_>, error: syn::Error) -> TokenStream {
    let error = error.into_compile_error();
    let ident = cont.ident;
    let name = &cont.name;
    let (impl_generics, ty_generics, _) = cont.generics.split_for_impl();
    let where_clause = deferred_where_clause(cont);
    quote! {
        #error
        #[allow(unused_qualifications)]
        const _: () = {
            #[automatically_derived]
            unsafe impl #impl_generics ::pgl::__private::Persistent for #ident #ty_generics
            #where_clause
            {
                const TYPE_ID: u32 = 0;
                const LAYOUT: u64 = 0;
                const TYPE_NAME: &'static str = #name;
            }
        };
    }
}

/// The struct's where clause plus `for<'__pgl> Self: Send + Sync + Sized + 'static`: the
/// supertraits of `Persistent`, required without making the impl itself an error when the
/// struct's fields do not provide them.
pub(crate) fn deferred_where_clause(cont: &Container<'_>) -> TokenStream {
    let ident = cont.ident;
    let (_, ty_generics, where_clause) = cont.generics.split_for_impl();
    let predicates = where_predicates(where_clause);
    quote! {
        where
            #predicates
            for<'__pgl> #ident #ty_generics: ::core::marker::Send
                + ::core::marker::Sync
                + ::core::marker::Sized
                + 'static,
    }
}

/// The predicates of `where_clause`, each followed by a comma, to start a where clause
/// that adds more (nothing without one).
pub(crate) fn where_predicates(where_clause: Option<&syn::WhereClause>) -> Option<TokenStream> {
    where_clause.map(|w| {
        let p = w.predicates.iter();
        quote!(#(#p,)*)
    })
}
