//! The layout facts the derive proves at compile time, and the layout fingerprint.
//!
//! Invariant: together the checks prove `size_of::<S>() == Σ size_of::<Field>()` (no byte
//! of padding between fields or at the end; rustc proves it of a `repr(transparent)`
//! struct, whose fields but one are zero-sized with alignment 1), `0 < size_of::<S>()`,
//! `align_of::<S>() <= MAX_ALIGN`, every field aligned (checked separately for
//! `repr(packed)`, where rustc does not guarantee it), and every field `Persistent`. Each
//! fact has its own trait whose `#[diagnostic::on_unimplemented]` message names the struct
//! and the field, and each check is spanned at the field it is about.
//!
//! Non-generic structs are checked while type-checking: a padding hole becomes a const
//! argument of a trait that is only implemented for `0`, so the error can say how many
//! bytes. Layout facts of a generic struct depend on its arguments, which a const argument
//! may not name; they are checked by `const` panics inside `LAYOUT`, so they fire for the
//! instantiations that are used (the runtime evaluates `LAYOUT` for every type it stores).
//!
//! Layout facts that depend on a rejected field type are not checked, so that one mistake
//! gives one error: only the fields before the first rejected one are examined.

use proc_macro2::{Ident, Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::visit_mut::VisitMut;
use syn::{LitByteStr, Type};

use crate::ast::{Container, Field};
use crate::check::Verdict;

/// The notes of a "field is not persistent" error.
const NOT_PERSISTENT_NOTES: [&str; 2] = [
    "persistent types are fixed-width integers, floats, arrays of persistent types, \
     `Oid<T>`, `pgl::PBool`, `pgl::PStr<N>`, `pgl::PBytes<N>`, and `#[repr(C)]` structs \
     that derive `Persistent`",
    "if `{Self}` is a struct of yours, add `#[derive(Persistent)]` and `#[repr(C)]` to it; \
     an enum is never persistent: store its discriminant in an integer field",
];

/// The first note of a padding error.
const PADDING_NOTE: &str = "padding bytes are uninitialized, but every byte of a persistent \
                            object is stored and checksummed";

/// Where a check's error points: from the first to the last token of a field (or other
/// node). On stable Rust one token has one span, so a range is made by giving the first
/// generated token the first span and the last generated token the last span.
#[derive(Clone, Copy)]
pub(crate) struct Site {
    first: Span,
    last: Span,
}

impl Site {
    /// The site of some tokens: their first and last token.
    pub(crate) fn of(tokens: impl ToTokens) -> Self {
        let mut iter = tokens.into_token_stream().into_iter();
        let first = iter.next().map_or_else(Span::call_site, |t| t.span());
        let last = iter.last().map_or(first, |t| t.span());
        Site { first, last }
    }

    /// The tokens with every span set to the first span, except the last token tree,
    /// which gets the last span; rustc then reports the expression over the whole range.
    fn respan(self, tokens: TokenStream) -> TokenStream {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let n = trees.len();
        trees
            .into_iter()
            .enumerate()
            .map(|(i, tree)| {
                let span = if i + 1 == n { self.last } else { self.first };
                respan_tree(tree, span)
            })
            .collect()
    }
}

fn respan_tree(mut tree: TokenTree, span: Span) -> TokenTree {
    if let TokenTree::Group(group) = &tree {
        let inner = group
            .stream()
            .into_iter()
            .map(|t| respan_tree(t, span))
            .collect();
        let mut new = proc_macro2::Group::new(group.delimiter(), inner);
        new.set_span(span);
        return TokenTree::Group(new);
    }
    tree.set_span(span);
    tree
}

/// What the layout code generators need to know about the input.
pub(crate) struct Layout<'a> {
    /// The parsed input.
    pub(crate) cont: &'a Container<'a>,
    /// The struct's fields.
    pub(crate) fields: &'a [Field<'a>],
    /// The syntactic checks' findings.
    pub(crate) verdict: &'a Verdict,
    /// Each field's type, with `Self` replaced by the struct's own type, so that it can be
    /// named outside the impl.
    pub(crate) field_tys: Vec<Type>,
}

impl<'a> Layout<'a> {
    /// Prepares the generators.
    pub(crate) fn new(
        cont: &'a Container<'a>,
        fields: &'a [Field<'a>],
        verdict: &'a Verdict,
    ) -> Self {
        let field_tys = fields.iter().map(|f| replace_self(f.ty, cont)).collect();
        Layout {
            cont,
            fields,
            verdict,
            field_tys,
        }
    }

    /// The fields whose layout does not depend on a rejected type.
    fn checked_prefix(&self) -> usize {
        self.verdict.first_rejected()
    }

    fn all_fields_accepted(&self) -> bool {
        self.checked_prefix() == self.fields.len()
    }

    /// Whether padding is checked between and after the fields. A `repr(transparent)`
    /// struct has none by rustc's own rule, and rustc places its zero-sized fields where it
    /// likes, not in declaration order, which the padding checks assume.
    fn checks_padding(&self) -> bool {
        self.cont.attrs.repr.transparent.is_none()
    }

    /// How many fields the "padding after field `i`" checks cover.
    fn gaps_checked(&self) -> usize {
        if self.checks_padding() {
            self.checked_prefix().saturating_sub(1)
        } else {
            0
        }
    }

    fn field_trait(field: &Field<'_>) -> Ident {
        format_ident!("__PglField{}", field.index)
    }

    /// One trait per accepted field, implemented for every persistent type, whose message
    /// names the field; `LAYOUT` reads each field's layout through it, so that a field of a
    /// non-persistent type is reported once, by name, at its type.
    pub(crate) fn field_traits(&self) -> TokenStream {
        let struct_name = self.cont.display_name();
        self.fields
            .iter()
            .filter(|f| !self.verdict.rejected[f.index])
            .map(|field| {
                let name = Self::field_trait(field);
                let message = format!(
                    "field `{}` of {struct_name} has type `{{Self}}`, which is not persistent",
                    field.name
                );
                let [what, fix] = NOT_PERSISTENT_NOTES;
                quote! {
                    #[diagnostic::on_unimplemented(
                        message = #message,
                        label = "not a persistent type",
                        note = #what,
                        note = #fix
                    )]
                    trait #name {
                        const LAYOUT: u64;
                    }
                    // Not recommended: the error is then about the field, not about a
                    // bound of this impl.
                    #[allow(unknown_or_malformed_diagnostic_attributes)]
                    #[diagnostic::do_not_recommend]
                    impl<T: ::pgl::__private::Persistent> #name for T {
                        const LAYOUT: u64 = <T as ::pgl::__private::Persistent>::LAYOUT;
                    }
                }
            })
            .collect()
    }

    /// The body of `LAYOUT`: the generic layout checks, then a hash of the struct's size and
    /// alignment and of each field's name, type layout, offset and size. Its local is named
    /// `__pgl_h`: a `let` pattern resolves to a constant (or const parameter) of the same
    /// name in the user's scope, whatever its span.
    pub(crate) fn fingerprint(&self) -> TokenStream {
        let checks = if self.cont.is_generic() {
            self.generic_checks()
        } else {
            TokenStream::new()
        };
        let terms = self
            .fields
            .iter()
            .zip(&self.field_tys)
            .filter(|(f, _)| !self.verdict.rejected[f.index])
            .map(|(field, ty)| {
                let tr = Self::field_trait(field);
                let member = &field.member;
                let name = LitByteStr::new(field.name.as_bytes(), Span::call_site());
                let layout = quote_spanned!(Site::of(ty).first=> <#ty as #tr>::LAYOUT);
                quote! {
                    let __pgl_h = ::pgl::__private::mix64(
                        __pgl_h,
                        ::pgl::__private::fnv1a64(#name, #layout),
                    );
                    let __pgl_h = ::pgl::__private::mix64(
                        __pgl_h,
                        ::pgl::__private::mix64(
                            ::core::mem::offset_of!(Self, #member) as u64,
                            ::core::mem::size_of::<#ty>() as u64,
                        ),
                    );
                }
            });
        quote! {
            #checks
            let __pgl_h: u64 = ::pgl::__private::fnv1a64(
                b"pgl::struct",
                ::core::mem::size_of::<Self>() as u64,
            );
            let __pgl_h =
                ::pgl::__private::mix64(__pgl_h, ::core::mem::align_of::<Self>() as u64);
            #(#terms)*
            __pgl_h
        }
    }

    /// The field trailing padding is reported after: the last field, or the one before it
    /// when the last is the link `#[extendible]` appended (a base's `__pgl_ext`, a group's
    /// `__pgl_next`). A link has alignment 1 and directly follows that field, so padding
    /// added before the link removes the trailing padding, and the link itself is not the
    /// user's to change.
    fn trailing_padding_blame(&self) -> Option<&Field<'a>> {
        let attrs = &self.cont.attrs;
        let link = if attrs.extendible.is_some() {
            Some("__pgl_ext")
        } else if attrs.group_of.is_some() {
            Some("__pgl_next")
        } else {
            None
        };
        match self.fields {
            [.., before, last] if link == Some(last.name.as_str()) => Some(before),
            _ => self.fields.last(),
        }
    }

    /// Where struct-wide alignment errors point: `align(N)` if written, else the name.
    fn align_site(&self) -> Site {
        match &self.cont.attrs.repr.align {
            Some(tokens) => Site::of(tokens),
            None => Site::of(self.cont.ident),
        }
    }

    /// The type-checking-time checks of a non-generic struct, as items of the derive's
    /// `const _` block. Empty for a generic struct.
    pub(crate) fn static_checks(&self) -> TokenStream {
        if self.cont.is_generic() {
            return TokenStream::new();
        }
        let ident = self.cont.ident;
        let name = self.cont.display_name();
        let mut out = TokenStream::new();
        let prefix = self.checked_prefix();

        // Padding after each field whose successor is also in the checked prefix.
        for i in 0..self.gaps_checked() {
            let (a, b) = (&self.fields[i], &self.fields[i + 1]);
            let (ma, mb) = (&a.member, &b.member);
            let ty = &self.field_tys[i];
            out.extend(
                StaticCheck {
                    name: format_ident!("__PglPaddingAfter{}", i),
                    params: quote!(const N: usize),
                    impl_params: quote!(),
                    ok_args: quote!(0),
                    diagnostic: diagnostic(
                        format!(
                            "{name} has {{N}} byte(s) of padding after field `{}`",
                            a.name
                        ),
                        "{N} byte(s) of padding follow this field",
                        &[
                            PADDING_NOTE.to_owned(),
                            format!(
                                "add an explicit field `_pad_{0}: [u8; {{N}}]` after `{0}`, or \
                                 order the fields from the largest alignment to the smallest",
                                a.name
                            ),
                        ],
                    ),
                    site: Site::of(a.tokens()),
                    args: quote! {{
                        ::core::mem::offset_of!(#ident, #mb)
                            - ::core::mem::offset_of!(#ident, #ma)
                            - ::core::mem::size_of::<#ty>()
                    }},
                }
                .emit(ident),
            );
        }

        if self.all_fields_accepted() {
            if let Some(last) = self.fields.last().filter(|_| self.checks_padding()) {
                let ml = &last.member;
                let ty = self.field_tys.last().map(ToTokens::to_token_stream);
                let blamed = self.trailing_padding_blame().unwrap_or(last);
                out.extend(
                    StaticCheck {
                        name: format_ident!("__PglTrailingPadding"),
                        params: quote!(const N: usize),
                        impl_params: quote!(),
                        ok_args: quote!(0),
                        diagnostic: diagnostic(
                            format!(
                                "{name} has {{N}} byte(s) of padding at its end, after field \
                                 `{}`",
                                blamed.name
                            ),
                            "{N} byte(s) of padding follow this field",
                            &[
                                PADDING_NOTE.to_owned(),
                                format!(
                                    "add an explicit field `_pad: [u8; {{N}}]` after `{}`, or \
                                     order the fields from the largest alignment to the smallest",
                                    blamed.name
                                ),
                            ],
                        ),
                        site: Site::of(blamed.tokens()),
                        args: quote! {{
                            ::core::mem::size_of::<#ident>()
                                - ::core::mem::offset_of!(#ident, #ml)
                                - ::core::mem::size_of::<#ty>()
                        }},
                    }
                    .emit(ident),
                );
            }

            out.extend(
                StaticCheck {
                    name: format_ident!("__PglZeroSized"),
                    params: quote!(const ZERO: bool),
                    impl_params: quote!(),
                    ok_args: quote!(false),
                    diagnostic: diagnostic(
                        format!("{name} is zero-sized"),
                        "this struct occupies no bytes",
                        &[
                            "a persistent object must occupy at least one byte: add a field of \
                           non-zero size"
                                .to_owned(),
                        ],
                    ),
                    site: Site::of(ident),
                    args: quote!({ ::core::mem::size_of::<#ident>() == 0 }),
                }
                .emit(ident),
            );

            out.extend(
                StaticCheck {
                    name: format_ident!("__PglMaxAlign"),
                    params: quote!(const ALIGN: usize, const MAX: usize, const TOO_BIG: bool),
                    impl_params: quote!(<const ALIGN: usize, const MAX: usize>),
                    ok_args: quote!(ALIGN, MAX, false),
                    diagnostic: diagnostic(
                        format!(
                            "{name} is aligned to {{ALIGN}} bytes, but a pool aligns objects \
                             to at most {{MAX}}"
                        ),
                        "aligned to {ALIGN} bytes",
                        &[
                            "lower the alignment to at most {MAX} (`#[repr(align(N))]`), or \
                           remove it"
                                .to_owned(),
                        ],
                    ),
                    site: self.align_site(),
                    args: quote! {
                        { ::core::mem::align_of::<#ident>() },
                        { ::pgl::__private::MAX_ALIGN },
                        { ::core::mem::align_of::<#ident>() > ::pgl::__private::MAX_ALIGN }
                    },
                }
                .emit(ident),
            );
        }

        if self.cont.attrs.repr.packed.is_some() {
            for i in 0..prefix {
                let field = &self.fields[i];
                let member = &field.member;
                let ty = &self.field_tys[i];
                out.extend(
                    StaticCheck {
                        name: format_ident!("__PglMisaligned{}", i),
                        params: quote!(const OFFSET: usize, const ALIGN: usize, const REM: usize),
                        impl_params: quote!(<const OFFSET: usize, const ALIGN: usize>),
                        ok_args: quote!(OFFSET, ALIGN, 0),
                        diagnostic: diagnostic(
                            format!(
                                "field `{}` of packed struct {name} is at offset {{OFFSET}}, \
                                 which is not a multiple of its alignment {{ALIGN}}",
                                field.name
                            ),
                            "misaligned field",
                            &[
                                "the pool hands out references to persistent objects, and a \
                                 reference to a misaligned value is undefined behavior"
                                    .to_owned(),
                                "move the field to an aligned offset (e.g. put larger fields \
                                 first), or remove `packed`"
                                    .to_owned(),
                            ],
                        ),
                        site: Site::of(field.tokens()),
                        args: quote! {
                            { ::core::mem::offset_of!(#ident, #member) },
                            { ::core::mem::align_of::<#ty>() },
                            {
                                ::core::mem::offset_of!(#ident, #member)
                                    % ::core::mem::align_of::<#ty>()
                            }
                        },
                    }
                    .emit(ident),
                );
            }
        }
        out
    }

    /// The checks of a generic struct, as statements at the start of `LAYOUT`: each panics
    /// during const evaluation, with a message that names the struct and the field.
    fn generic_checks(&self) -> TokenStream {
        let name = self.cont.display_name();
        let mut out = TokenStream::new();
        let prefix = self.checked_prefix();
        let panic_at = |site: Site, message: String| site.respan(quote!(::core::panic!(#message)));

        for i in 0..self.gaps_checked() {
            let (a, b) = (&self.fields[i], &self.fields[i + 1]);
            let (ma, mb) = (&a.member, &b.member);
            let ty = &self.field_tys[i];
            let panic = panic_at(
                Site::of(a.tokens()),
                format!(
                    "{name} has padding after field `{0}` with these type arguments: add an \
                     explicit padding field after `{0}`, or order the fields from the largest \
                     alignment to the smallest",
                    a.name
                ),
            );
            out.extend(quote! {
                if ::core::mem::offset_of!(Self, #mb)
                    != ::core::mem::offset_of!(Self, #ma) + ::core::mem::size_of::<#ty>()
                {
                    #panic
                }
            });
        }

        if self.all_fields_accepted() {
            if let Some(last) = self.fields.last().filter(|_| self.checks_padding()) {
                let ml = &last.member;
                let ty = self.field_tys.last().map(ToTokens::to_token_stream);
                let panic = panic_at(
                    Site::of(last.tokens()),
                    format!(
                        "{name} has padding at its end, after field `{0}`, with these type \
                         arguments: add an explicit padding field after `{0}`, or order the \
                         fields from the largest alignment to the smallest",
                        last.name
                    ),
                );
                out.extend(quote! {
                    if ::core::mem::size_of::<Self>()
                        != ::core::mem::offset_of!(Self, #ml) + ::core::mem::size_of::<#ty>()
                    {
                        #panic
                    }
                });
            }
            let panic = panic_at(
                Site::of(self.cont.ident),
                format!(
                    "{name} is zero-sized with these type arguments, but a persistent object \
                     must occupy at least one byte"
                ),
            );
            out.extend(quote! {
                if ::core::mem::size_of::<Self>() == 0 {
                    #panic
                }
            });
            let panic = panic_at(
                self.align_site(),
                format!(
                    "{name} is aligned to more than `pgl::MAX_ALIGN` bytes with these type \
                     arguments, more than a pool aligns objects to"
                ),
            );
            out.extend(quote! {
                if ::core::mem::align_of::<Self>() > ::pgl::__private::MAX_ALIGN {
                    #panic
                }
            });
        }

        if self.cont.attrs.repr.packed.is_some() {
            for i in 0..prefix {
                let field = &self.fields[i];
                let member = &field.member;
                let ty = &self.field_tys[i];
                let panic = panic_at(
                    Site::of(field.tokens()),
                    format!(
                        "field `{}` of packed struct {name} is not aligned with these type \
                         arguments: move it to an aligned offset, or remove `packed`",
                        field.name
                    ),
                );
                out.extend(quote! {
                    if ::core::mem::offset_of!(Self, #member) % ::core::mem::align_of::<#ty>() != 0 {
                        #panic
                    }
                });
            }
        }
        out
    }
}

/// The struct's where clause with `Self` replaced by the struct's own type, for items
/// outside the impl (where `Self` would mean something else), plus `T: Persistent` (pgl's)
/// for each type parameter, as the impl of `Persistent` has it (see
/// `expand::persistent::persistent_params`).
pub(crate) fn where_clause_without_self(cont: &Container<'_>) -> Option<syn::WhereClause> {
    let mut wc = cont
        .generics
        .where_clause
        .clone()
        .unwrap_or_else(|| syn::parse_quote!(where));
    for pred in wc.predicates.iter_mut() {
        if let syn::WherePredicate::Type(p) = pred {
            p.bounded_ty = replace_self(&p.bounded_ty, cont);
        }
    }
    for param in cont.generics.type_params() {
        let ident = &param.ident;
        wc.predicates
            .push(syn::parse_quote!(#ident: ::pgl::__private::Persistent));
    }
    (!wc.predicates.is_empty()).then_some(wc)
}

/// The field's type with every bare `Self` replaced by the struct's own type, spanned at
/// the `Self` it replaces.
fn replace_self(ty: &Type, cont: &Container<'_>) -> Type {
    replace_self_with(ty, cont.ident, cont.generics)
}

/// `ty` with every bare `Self` replaced by `ident` with `generics`' parameters, spanned at
/// the `Self` it replaces.
pub(crate) fn replace_self_with(ty: &Type, ident: &Ident, generics: &syn::Generics) -> Type {
    struct ReplaceSelf<'c> {
        ident: &'c syn::Ident,
        generics: &'c syn::Generics,
    }
    impl VisitMut for ReplaceSelf<'_> {
        fn visit_type_mut(&mut self, ty: &mut Type) {
            if let Type::Path(p) = ty {
                if p.qself.is_none() && p.path.is_ident("Self") {
                    let span = p.path.segments[0].ident.span();
                    let ident = self.ident;
                    let (_, ty_generics, _) = self.generics.split_for_impl();
                    *ty = syn::parse_quote_spanned!(span=> #ident #ty_generics);
                    return;
                }
            }
            syn::visit_mut::visit_type_mut(self, ty);
        }
    }
    let mut ty = ty.clone();
    ReplaceSelf { ident, generics }.visit_type_mut(&mut ty);
    ty
}

/// One layout fact of a non-generic struct, proved while type-checking: a trait with const
/// parameters, implemented for the struct only where the fact holds, and a `const` item
/// that names the trait with the values computed for the struct. When the fact does not
/// hold, rustc reports the trait's `on_unimplemented` message, with the computed values, at
/// the site (the self type `Struct<>` of the check is spanned over it).
struct StaticCheck {
    name: Ident,
    params: TokenStream,
    impl_params: TokenStream,
    ok_args: TokenStream,
    diagnostic: TokenStream,
    site: Site,
    args: TokenStream,
}

impl StaticCheck {
    fn emit(self, ident: &Ident) -> TokenStream {
        let StaticCheck {
            name,
            params,
            impl_params,
            ok_args,
            diagnostic,
            site,
            args,
        } = self;
        let self_ty = site.respan(quote!(#ident<>));
        quote! {
            #[diagnostic::on_unimplemented(#diagnostic)]
            trait #name<#params> {
                const OK: () = ();
            }
            impl #impl_params #name<#ok_args> for #ident {}
            const _: () = <#self_ty as #name<#args>>::OK;
        }
    }
}

/// The arguments of `#[diagnostic::on_unimplemented(...)]`.
fn diagnostic(message: String, label: &str, notes: &[String]) -> TokenStream {
    quote! {
        message = #message,
        label = #label,
        #(note = #notes),*
    }
}
