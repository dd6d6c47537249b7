//! The attributes the derive reads: `#[repr(...)]` and `#[pgl(...)]`.
//!
//! Invariant: parsing never stops at the first mistake; every malformed or unknown
//! `#[pgl]` key is reported through the [`Ctxt`], with the span of that key.
//! `#[repr]` syntax errors are left to rustc, which reports them itself.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned;
use syn::{Attribute, Expr, ExprLit, Lit, LitInt, Meta, Token};

use crate::ctxt::Ctxt;

/// What `#[repr(...)]` attributes say about the struct's layout.
#[derive(Default)]
pub(crate) struct Repr {
    /// `repr(C)`, with the span of `C`.
    pub(crate) c: Option<Span>,
    /// `repr(transparent)`, with the span of `transparent`.
    pub(crate) transparent: Option<Span>,
    /// `repr(Rust)`, with the span of `Rust`.
    pub(crate) rust: Option<Span>,
    /// `repr(packed)` or `repr(packed(N))`: the tokens, for spans.
    pub(crate) packed: Option<TokenStream>,
    /// `repr(align(N))`: the tokens, for spans.
    pub(crate) align: Option<TokenStream>,
}

impl Repr {
    /// Whether the field order and offsets are fixed by the repr (C or transparent).
    pub(crate) fn is_stable(&self) -> bool {
        self.c.is_some() || self.transparent.is_some()
    }
}

/// `#[pgl(id = N)]`: an explicit type id.
/// The first type id pgl keeps for its own objects (`pgl_runtime::persistent::RESERVED_TYPE_IDS`).
const RESERVED_TYPE_IDS: u32 = 0xffff_ff00;

/// An explicit type id.
pub(crate) struct TypeId {
    /// The id.
    pub(crate) value: u32,
    /// The span of the literal, where a duplicate id in the same module is reported.
    pub(crate) span: Span,
}

/// The container-level attributes of a derive input.
#[derive(Default)]
pub(crate) struct Container {
    /// What the `repr` attributes say.
    pub(crate) repr: Repr,
    /// `#[pgl(id = N)]`, if given and valid.
    pub(crate) id: Option<TypeId>,
    /// `#[pgl(__group_of(Base, k))]`, which `#[extendible]` puts on the struct of its
    /// extension group `k`: the type id is derived from the base's.
    pub(crate) group_of: Option<(syn::Path, LitInt)>,
    /// `#[pgl(__extendible)]`, which `#[extendible]` puts on the base struct: its objects
    /// own their chain of groups (`Persistent::__OWNS_TAIL`). The attribute, for spans.
    pub(crate) extendible: Option<Attribute>,
    /// `#[pgl(__reserve = N)]`, which `#[extendible(reserve = N)]` puts on the base
    /// struct: the bytes its objects keep after the value for inline groups
    /// (`Persistent::__RESERVE`).
    pub(crate) reserve: Option<LitInt>,
}

impl Container {
    /// Reads the container's attributes, reporting every bad `#[pgl]` key.
    pub(crate) fn from_ast(cx: &Ctxt, attrs: &[Attribute]) -> Self {
        let mut out = Self::default();
        let mut seen_id = false;
        for attr in attrs {
            if attr.path().is_ident("repr") {
                parse_repr(attr, &mut out.repr);
            } else if attr.path().is_ident("pgl") {
                if let Some(group_of) = parse_group_of(attr) {
                    out.group_of = Some(group_of);
                    continue;
                }
                if is_hidden_key(attr, EXTENDIBLE) {
                    out.extendible = Some(attr.clone());
                    continue;
                }
                if let Some(n) = parse_reserve(attr) {
                    out.reserve = Some(n);
                    continue;
                }
                parse_pgl(cx, attr, &mut out.id, &mut seen_id);
            }
        }
        out
    }
}

/// The `#[pgl(...)]` key `#[extendible]` puts on the fields it hides: its link, and base
/// fields an extension replaced. Not for users (it is reported as unknown in messages).
pub(crate) const NO_ACCESSORS: &str = "__no_accessors";

/// What the attributes of one field say.
#[derive(Default)]
pub(crate) struct FieldAttrs {
    /// `#[pgl(__no_accessors)]`: the field gets no accessor (set by `#[extendible]`).
    pub(crate) no_accessors: bool,
}

/// Reads the attributes of one field: the hidden key `#[extendible]` sets; every other
/// `#[pgl]` key is unknown, and `#[extension]` without `#[extendible]` is a mistake.
pub(crate) fn field_attrs(cx: &Ctxt, attrs: &[Attribute]) -> FieldAttrs {
    let mut out = FieldAttrs::default();
    for attr in attrs {
        if attr.path().is_ident("extension") {
            cx.error_spanned_by(
                attr,
                "`#[extension]` fields belong to an `#[extendible]` struct: add `#[extendible]` \
                 above `#[derive(Persistent)]` (in the first version that stores the struct: \
                 it appends the hidden link the groups hang from)",
            );
        }
    }
    for attr in attrs.iter().filter(|a| a.path().is_ident("pgl")) {
        let Meta::List(_) = attr.meta else {
            cx.error_spanned_by(
                attr,
                "`#[pgl]` on a field takes no keys: remove the attribute",
            );
            continue;
        };
        let result = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident(NO_ACCESSORS) {
                out.no_accessors = true;
                return Ok(());
            }
            cx.error_spanned_by(
                &meta.path,
                format!(
                    "unknown `pgl` field attribute `{}`: fields take no `pgl` keys; remove it",
                    path_to_string(&meta.path)
                ),
            );
            skip_value(&meta)
        });
        if let Err(e) = result {
            cx.syn_error(e);
        }
    }
    out
}

/// The `#[pgl(...)]` key `#[extendible]` puts on the base struct. Not for users.
pub(crate) const EXTENDIBLE: &str = "__extendible";

/// Whether `attr` is exactly `#[pgl(key)]`.
fn is_hidden_key(attr: &Attribute, key: &str) -> bool {
    let mut found = false;
    let mut others = false;
    let _ = attr.parse_nested_meta(|meta| {
        if meta.path.is_ident(key) && meta.input.is_empty() {
            found = true;
        } else {
            others = true;
        }
        Ok(())
    });
    found && !others
}

/// The `#[pgl(...)]` key `#[extendible(reserve = N)]` puts on the base struct. Not for
/// users.
pub(crate) const RESERVE: &str = "__reserve";

/// `#[pgl(__reserve = N)]`, set by `#[extendible(reserve = N)]` (not a user key).
fn parse_reserve(attr: &Attribute) -> Option<LitInt> {
    let mut out = None;
    let mut others = false;
    let _ = attr.parse_nested_meta(|meta| {
        if meta.path.is_ident(RESERVE) {
            out = Some(meta.value()?.parse()?);
        } else {
            others = true;
        }
        Ok(())
    });
    out.filter(|_| !others)
}

/// `#[pgl(__group_of(Base, k))]`, set by `#[extendible]` (not a user key).
fn parse_group_of(attr: &Attribute) -> Option<(syn::Path, LitInt)> {
    let mut out = None;
    let _ = attr.parse_nested_meta(|meta| {
        if meta.path.is_ident("__group_of") {
            let content;
            syn::parenthesized!(content in meta.input);
            let base: syn::Path = content.parse()?;
            content.parse::<Token![,]>()?;
            let k: LitInt = content.parse()?;
            out = Some((base, k));
        }
        Ok(())
    });
    out
}

fn parse_repr(attr: &Attribute, repr: &mut Repr) {
    // Malformed reprs are rustc's to report; keep whatever parsed.
    let _ = attr.parse_nested_meta(|meta| {
        let path = &meta.path;
        if path.is_ident("C") {
            repr.c = Some(path.span());
        } else if path.is_ident("transparent") {
            repr.transparent = Some(path.span());
        } else if path.is_ident("Rust") {
            repr.rust = Some(path.span());
        } else if path.is_ident("packed") {
            let mut tokens = path.to_token_stream();
            if meta.input.peek(syn::token::Paren) {
                tokens.extend([meta.input.parse::<TokenTree>()?]);
            }
            repr.packed = Some(tokens);
        } else if path.is_ident("align") {
            let mut tokens = path.to_token_stream();
            if meta.input.peek(syn::token::Paren) {
                tokens.extend([meta.input.parse::<TokenTree>()?]);
            }
            repr.align = Some(tokens);
        } else {
            skip_value(&meta)?;
        }
        Ok(())
    });
}

/// Reads one `#[pgl(...)]`; `seen_id` carries over the attributes of one container, so
/// that an id given twice is reported even across attributes.
fn parse_pgl(cx: &Ctxt, attr: &Attribute, id: &mut Option<TypeId>, seen_id: &mut bool) {
    let Meta::List(_) = attr.meta else {
        cx.error_spanned_by(
            attr,
            "expected `#[pgl(id = N)]`, where `N` is a non-zero `u32` type id",
        );
        return;
    };
    let result = attr.parse_nested_meta(|meta| {
        if meta.path.is_ident("id") {
            let value: Expr = meta.value()?.parse()?;
            if *seen_id {
                cx.error_spanned_by(&meta.path, "duplicate `id` key: give `#[pgl(id = N)]` once");
                return Ok(());
            }
            *seen_id = true;
            if let Some(parsed) = parse_type_id(cx, &value) {
                *id = Some(parsed);
            }
        } else {
            cx.error_spanned_by(
                &meta.path,
                format!(
                    "unknown `pgl` attribute `{}`: the only key is `id`, as in `#[pgl(id = 42)]`",
                    path_to_string(&meta.path)
                ),
            );
            skip_value(&meta)?;
        }
        Ok(())
    });
    if let Err(e) = result {
        cx.syn_error(e);
    }
}

/// `e` out of parentheses and of the invisible groups a `macro_rules!` macro wraps an
/// `$x:expr` or `$x:literal` fragment in (a literal or a closure in either is still one).
pub(crate) fn ungrouped(mut e: &Expr) -> &Expr {
    loop {
        e = match e {
            Expr::Group(g) => &g.expr,
            Expr::Paren(p) => &p.expr,
            _ => return e,
        };
    }
}

fn parse_type_id(cx: &Ctxt, value: &Expr) -> Option<TypeId> {
    let lit: &LitInt = match ungrouped(value) {
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) => lit,
        _ => {
            cx.error_spanned_by(
                value,
                "expected an integer literal type id, as in `#[pgl(id = 42)]`",
            );
            return None;
        }
    };
    let suffix_ok = matches!(lit.suffix(), "" | "u32");
    match lit.base10_parse::<u32>() {
        Ok(0) => {
            cx.error_spanned_by(
                lit,
                "type id 0 is reserved for \"no type\": choose a non-zero id",
            );
            None
        }
        Ok(value) if value >= RESERVED_TYPE_IDS => {
            cx.error_spanned_by(
                lit,
                format!(
                    "type ids {RESERVED_TYPE_IDS:#x} and above are reserved for pgl's own \
                     use: choose a smaller id"
                ),
            );
            None
        }
        Ok(value) if suffix_ok => Some(TypeId {
            value,
            span: lit.span(),
        }),
        Ok(_) => {
            cx.error_spanned_by(
                lit,
                "a type id is a `u32`: write it without a suffix, as in `#[pgl(id = 42)]`",
            );
            None
        }
        Err(_) => {
            cx.error_spanned_by(
                lit,
                "type id out of range: type ids are `u32` (1 to 4294967295)",
            );
            None
        }
    }
}

/// Consumes the value of an unknown key (`= expr` or `(...)`) so that parsing can go on
/// with the next key.
fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        meta.value()?.parse::<Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        meta.input.parse::<TokenTree>()?;
    }
    Ok(())
}

fn path_to_string(path: &syn::Path) -> String {
    path.to_token_stream().to_string().replace(' ', "")
}
