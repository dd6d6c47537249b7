//! The parsed derive input: a view of `syn::DeriveInput` that keeps the original nodes,
//! so that every later error can point at the token that caused it.
//!
//! Invariant: building the view never fails; shapes the derive cannot handle (enums,
//! unions) are represented and rejected by `check`, not here.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{DeriveInput, Ident, Member, Type};

use crate::attr;
use crate::ctxt::Ctxt;

/// A derive input.
pub(crate) struct Container<'a> {
    /// The type's name.
    pub(crate) ident: &'a Ident,
    /// The type's name without a `r#` prefix, for messages.
    pub(crate) name: String,
    /// The type's visibility.
    pub(crate) vis: &'a syn::Visibility,
    /// The type's generics, as written.
    pub(crate) generics: &'a syn::Generics,
    /// Its `#[repr]` and `#[pgl]` attributes.
    pub(crate) attrs: attr::Container,
    /// What kind of item it is.
    pub(crate) data: Data<'a>,
}

/// The kind of item the derive was put on.
pub(crate) enum Data<'a> {
    /// A struct (named, tuple or unit).
    Struct(Vec<Field<'a>>),
    /// An enum: the `enum` keyword, for the error.
    Enum(Span),
    /// A union: the `union` keyword, for the error.
    Union(Span),
}

/// One field of a struct.
pub(crate) struct Field<'a> {
    /// Position in declaration order.
    pub(crate) index: usize,
    /// `name` or `0`, as used in `offset_of!`.
    pub(crate) member: Member,
    /// The field's name without a `r#` prefix (or its index), for messages.
    pub(crate) name: String,
    /// The field's identifier, for a named field.
    pub(crate) ident: Option<&'a Ident>,
    /// The field's type, as written.
    pub(crate) ty: &'a Type,
    /// The whole field, for spans.
    pub(crate) original: &'a syn::Field,
    /// Whether `#[extendible]` hid the field (its link, or a replaced base field): it gets
    /// no accessor.
    pub(crate) no_accessors: bool,
}

impl Field<'_> {
    /// The tokens of the whole field (`name: Type`), to span errors from its first to its
    /// last token.
    pub(crate) fn tokens(&self) -> TokenStream {
        let mut field = self.original.clone();
        field.attrs.clear();
        field.vis = syn::Visibility::Inherited;
        field.into_token_stream()
    }
}

impl<'a> Container<'a> {
    /// Builds the view, reporting bad `#[pgl]` attributes into `cx`.
    pub(crate) fn from_ast(cx: &Ctxt, input: &'a DeriveInput) -> Self {
        let attrs = attr::Container::from_ast(cx, &input.attrs);
        let data = match &input.data {
            syn::Data::Struct(data) => Data::Struct(
                data.fields
                    .iter()
                    .enumerate()
                    .map(|(index, field)| {
                        let attrs = attr::field_attrs(cx, &field.attrs);
                        let (member, name) = match &field.ident {
                            Some(ident) => (Member::Named(ident.clone()), unraw(ident)),
                            None => (
                                Member::Unnamed(syn::Index {
                                    index: index as u32,
                                    span: field.ty.span(),
                                }),
                                index.to_string(),
                            ),
                        };
                        Field {
                            index,
                            member,
                            name,
                            ident: field.ident.as_ref(),
                            ty: &field.ty,
                            original: field,
                            no_accessors: attrs.no_accessors,
                        }
                    })
                    .collect(),
            ),
            syn::Data::Enum(data) => Data::Enum(data.enum_token.span),
            syn::Data::Union(data) => Data::Union(data.union_token.span),
        };
        Container {
            ident: &input.ident,
            name: unraw(&input.ident),
            vis: &input.vis,
            generics: &input.generics,
            attrs,
            data,
        }
    }

    /// The struct as messages name it, quoted: an extension group struct `#[extendible]`
    /// generated is named after its base (`` `Node` (extension group 1) ``).
    pub(crate) fn display_name(&self) -> String {
        match &self.attrs.group_of {
            Some((base, k)) => format!(
                "`{}` (extension group {})",
                quote::ToTokens::to_token_stream(base)
                    .to_string()
                    .replace(' ', ""),
                k.base10_digits()
            ),
            None => format!("`{}`", self.name),
        }
    }

    /// Whether the impl has type or const parameters, so that layout facts depend on them
    /// and can only be checked when the type is used.
    pub(crate) fn is_generic(&self) -> bool {
        self.generics
            .params
            .iter()
            .any(|p| !matches!(p, syn::GenericParam::Lifetime(_)))
    }
}

/// An identifier as the user reads it (`r#type` is `type`).
pub(crate) fn unraw(ident: &Ident) -> String {
    let s = ident.to_string();
    match s.strip_prefix("r#") {
        Some(rest) => rest.to_owned(),
        None => s,
    }
}
