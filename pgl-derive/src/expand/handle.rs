//! The field accessors `#[derive(Persistent)]` generates: one trait per struct, named
//! `<Struct>Fields`, implemented for every type that derefs to the struct.
//!
//! Per named field `f: F` the trait has a getter `f(&self) -> &F` (a read in place, on any
//! handle: `Ref`, `Read`, `Mut`, `Place`, `Detached`, or a plain reference), a setter
//! `set_f(&mut self, F)` and a place `f_mut(&mut self) -> Place<F>` (on handles that may
//! change the object, through `AsPlace`), and for an array field `[E; N]` an indexed getter
//! `f_at(&self, usize) -> &E` and setter `set_f_at(&mut self, usize, E)`. Setters go
//! through `Place::project`, so they mark only the field's bytes modified, and nested
//! structs are reached without copying: `seg.from_mut().set_x(3)`.
//!
//! Invariant: accessors exist only for named fields at least as visible as the struct
//! (a private field never gets a public accessor), never for `repr(packed)` structs (a
//! reference to a packed field may be misaligned), and only for a struct without errors,
//! so that a rejected field causes no second error here.

use std::collections::BTreeMap;

use proc_macro2::{Ident, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::{Type, Visibility};

use crate::ast::{Container, Field};
use crate::ctxt::Ctxt;

/// The fields that get accessors.
fn accessible<'f, 'a>(cont: &Container<'_>, fields: &'f [Field<'a>]) -> Vec<&'f Field<'a>> {
    if cont.attrs.repr.packed.is_some() {
        return Vec::new();
    }
    fields
        .iter()
        .filter(|f| {
            f.ident.is_some() && !f.no_accessors && visible_enough(&f.original.vis, cont.vis)
        })
        .collect()
}

/// Whether a field with visibility `field` may have an accessor in a trait with the
/// struct's visibility `outer`.
pub(crate) fn visible_enough(field: &Visibility, outer: &Visibility) -> bool {
    use quote::ToTokens;
    match (field, outer) {
        (Visibility::Public(_), _) | (_, Visibility::Inherited) => true,
        (f, o) => f.to_token_stream().to_string() == o.to_token_stream().to_string(),
    }
}

/// The element type of an array field, as written.
fn array_element(ty: &Type) -> Option<&Type> {
    match ty {
        Type::Array(a) => Some(&a.elem),
        Type::Group(g) => array_element(&g.elem),
        Type::Paren(p) => array_element(&p.elem),
        _ => None,
    }
}

/// The methods generated for one field, by name.
fn method_names(field: &Field<'_>) -> Vec<Ident> {
    let Some(ident) = field.ident else {
        return Vec::new();
    };
    let bare = ident.unraw();
    let mut names = vec![
        ident.clone(),
        format_ident!("set_{}", bare),
        format_ident!("{}_mut", bare),
    ];
    if array_element(field.ty).is_some() {
        names.push(format_ident!("{}_at", bare));
        names.push(format_ident!("set_{}_at", bare));
    }
    names
}

/// Reports fields whose accessors would have the same name (a field `a` and a field
/// `set_a`), at the second field.
pub(crate) fn check(cx: &Ctxt, cont: &Container<'_>, fields: &[Field<'_>]) {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    // The trait's own hidden method.
    seen.insert(
        "__pgl_view".to_owned(),
        "(pgl's own `__pgl_view`)".to_owned(),
    );
    // A field named `__pgl…` is reported as reserved (`expand::persistent`): once.
    let reserved = |f: &&Field<'_>| f.name.starts_with(crate::extension::RESERVED_PREFIX);
    for field in accessible(cont, fields)
        .into_iter()
        .filter(|f| !reserved(f))
    {
        for name in method_names(field) {
            let key = name.unraw().to_string();
            if let Some(other) = seen.get(&key) {
                cx.error_spanned_by(
                    field.original,
                    format!(
                        "fields `{other}` and `{}` would both have an accessor named `{key}` in \
                         `{}Fields`: rename one of them",
                        field.name, cont.name
                    ),
                );
            } else {
                seen.insert(key, field.name.clone());
            }
        }
    }
}

/// The `<Struct>Fields` trait and its blanket impl.
pub(crate) fn expand(
    cont: &Container<'_>,
    fields: &[Field<'_>],
    field_tys: &[Type],
) -> TokenStream {
    let fields = accessible(cont, fields);
    let ident = cont.ident;
    let vis = cont.vis;
    let name = &cont.name;
    let trait_name = format_ident!("{}Fields", name, span = ident.span());
    let (impl_generics, ty_generics, _) = cont.generics.split_for_impl();
    let where_clause = crate::layout::where_clause_without_self(cont);
    // Names the bodies bind. A binding pattern resolves to an item of the same name in the
    // user's scope (a `const value`, a unit struct `s`) whatever its span, so the names are
    // ones a user does not write.
    let value = Ident::new("__pgl_value", Span::mixed_site());
    let index = Ident::new("__pgl_index", Span::mixed_site());
    let whole = Ident::new("__pgl_whole", Span::mixed_site());
    let this = quote!(#ident #ty_generics);
    let as_place = quote!(::pgl::__private::AsPlace<#this>);
    let place = quote!(::pgl::__private::Place);

    let mut methods = Vec::new();
    for field in fields {
        let Some(getter) = field.ident else { continue };
        let ty = &field_tys[field.index];
        let bare = getter.unraw();
        let member = &field.member;
        let shown = &field.name;
        let setter = format_ident!("set_{}", bare);
        let place_fn = format_ident!("{}_mut", bare);
        let span = getter.span();
        // A field of a non-persistent type is reported once, by `layout`; the binder keeps
        // this bound from being a second error (see `fallback`), so its accessors only
        // fail where they are called.
        let writable = quote! {
            Self: #as_place,
            for<'__pgl> #ty: ::pgl::__private::Persistent,
        };

        let get_doc = format!("`{shown}`, read in place.");
        let set_doc = format!(
            "Sets `{shown}`, marking only its bytes modified (so the commit logs and checksums \
             only them)."
        );
        let place_doc = format!(
            "The place of `{shown}`: `.set(v)`, the setters of a nested struct, `.at(i)` of \
             an array."
        );
        methods.push(quote_spanned! {span=>
            #[doc = #get_doc]
            #[inline]
            fn #getter(&self) -> &#ty {
                &self.__pgl_view().#member
            }
            #[doc = #set_doc]
            #[inline]
            fn #setter(&mut self, #value: #ty) where #writable {
                ::pgl::__private::AsPlace::place(self).project(|#whole| &#whole.#member).set(#value)
            }
            #[doc = #place_doc]
            #[inline]
            fn #place_fn(&mut self) -> #place<'_, #ty> where #writable {
                ::pgl::__private::AsPlace::place(self).project(|#whole| &#whole.#member)
            }
        });
        if let Some(elem) = array_element(ty) {
            let at = format_ident!("{}_at", bare);
            let set_at = format_ident!("set_{}_at", bare);
            let at_doc = format!(
                "Element `i` of `{shown}`, read in place.\n\n# Panics\nIf `i` is out of bounds."
            );
            let set_at_doc = format!(
                "Sets element `i` of `{shown}`, marking only its bytes modified.\n\n# Panics\n\
                 If `i` is out of bounds."
            );
            methods.push(quote_spanned! {span=>
                #[doc = #at_doc]
                #[inline]
                fn #at(&self, #index: usize) -> &#elem {
                    &self.__pgl_view().#member[#index]
                }
                #[doc = #set_at_doc]
                #[inline]
                fn #set_at(&mut self, #index: usize, #value: #elem) where #writable {
                    ::pgl::__private::AsPlace::place(self)
                        .project(|#whole| &#whole.#member)
                        .at(#index)
                        .set(#value)
                }
            });
        }
    }
    if methods.is_empty() {
        return TokenStream::new();
    }

    let mut impl_params = cont.generics.clone();
    impl_params.params.push(syn::parse_quote! {
        __PglView: ?::core::marker::Sized + ::core::ops::Deref<Target = #this>
    });
    let (impl_params, _, _) = impl_params.split_for_impl();
    let doc = format!(
        "Field accessors of [`{name}`], generated by `#[derive(Persistent)]`.\n\n\
         Getters work on every handle that derefs to a `{name}` (`pool.get`, `tx.get`, \
         `tx.open`, a place, a plain reference); setters and places on handles that may \
         change it (`tx.open`, `pool.open_mut`, a place), and mark only the bytes they \
         write. Bring the trait into scope to use them."
    );
    quote! {
        #[doc = #doc]
        #[allow(
            dead_code,
            non_camel_case_types,
            non_snake_case,
            deprecated,
            clippy::wrong_self_convention,
            clippy::should_implement_trait,
            clippy::must_use_candidate
        )]
        #vis trait #trait_name #impl_generics #where_clause {
            /// The struct this view shows (every accessor reads through it).
            #[doc(hidden)]
            fn __pgl_view(&self) -> &#this;
            #(#methods)*
        }
        #[automatically_derived]
        impl #impl_params #trait_name #ty_generics for __PglView #where_clause {
            #[inline]
            fn __pgl_view(&self) -> &#this {
                ::core::ops::Deref::deref(self)
            }
        }
        #[automatically_derived]
        impl #impl_generics #trait_name #ty_generics for #this #where_clause {
            #[inline]
            fn __pgl_view(&self) -> &#this {
                self
            }
        }
    }
}
