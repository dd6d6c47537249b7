//! Derive macros of pgl. Use them through the `pgl` crate, which re-exports them with
//! their documentation; the code they generate names only `::pgl::__private` and `core`.
//!
//! The pipeline, after serde_derive: `ast` (the input, keeping its nodes for spans) →
//! `attr` (`#[repr]`, `#[pgl]`) → `check` (what syntax shows) → `expand` (the impl and the
//! type-level checks of `layout`), with every error gathered by `ctxt` and reported at
//! once; `fallback` keeps a rejected struct from causing errors elsewhere.
#![deny(missing_docs)]

use proc_macro::TokenStream;

mod ast;
mod attr;
mod check;
mod ctxt;
mod expand;
mod extension;
mod fallback;
mod layout;

#[cfg(test)]
mod tests;

/// Derives `Persistent` for a `#[repr(C)]` struct whose fields are all persistent.
///
/// See `pgl::Persistent` for what it accepts, what it generates, and every error it
/// reports.
#[proc_macro_derive(Persistent, attributes(pgl, extension))]
pub fn derive_persistent(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    expand::persistent::derive(&input).into()
}

/// Makes a `#[derive(Persistent)]` struct extendible: its fields without `#[extension]`
/// are a frozen base, fields added later carry `#[extension(N, init = …)]`.
///
/// See `pgl::extendible` for what it generates and every error it reports.
#[proc_macro_attribute]
pub fn extendible(args: TokenStream, input: TokenStream) -> TokenStream {
    expand::extendible::expand(args.into(), input.into()).into()
}
