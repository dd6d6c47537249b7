//! The model of an `#[extendible]` struct: its frozen base, its numbered extension groups,
//! and which field each accessor name reads in each version.
//!
//! Invariant: building the model reports every mistake (groups out of order or skipped, a
//! field without `init`, `replaces` naming no field, a name used twice) through the
//! [`Ctxt`] at the token that shows it, and still yields a model of what parsed, so that
//! `expand::extendible` can emit the struct without cascading errors.

use proc_macro2::Span;
use syn::{Expr, Field, Ident, ItemStruct, LitInt, Meta, Token};

use crate::ctxt::Ctxt;

/// The prefix of the names of the links `#[extendible]` appends (`__pgl_ext`,
/// `__pgl_next`): no field of the user's may begin with it.
pub(crate) const RESERVED_PREFIX: &str = "__pgl";

/// The error for a user's field named `name`, which begins with [`RESERVED_PREFIX`].
pub(crate) fn reserved_name_message(name: &str) -> String {
    format!(
        "field names beginning with `{RESERVED_PREFIX}` are reserved for the links \
         `#[extendible]` adds: rename `{name}`"
    )
}

/// `#[extendible(...)]`'s arguments.
#[derive(Default)]
pub(crate) struct Args {
    /// `base = 0x...`: the base layout fingerprint the struct must keep.
    pub(crate) pinned_base: Option<LitInt>,
    /// `reserve = N`: bytes each object keeps after its value for inline groups.
    pub(crate) reserve: Option<LitInt>,
    /// `upgrade = on_write` (its `on_write`): objects are upgraded in DRAM when read and
    /// in the pool when written. `upgrade = on_read`, the default, is `None`.
    pub(crate) on_write: Option<Ident>,
}

/// The largest `reserve = N`.
pub(crate) const MAX_RESERVE: u64 = 4096;

impl Args {
    pub(crate) fn parse(cx: &Ctxt, args: proc_macro2::TokenStream) -> Args {
        let mut out = Args::default();
        if args.is_empty() {
            return out;
        }
        let mut seen: Vec<String> = Vec::new();
        let parser = syn::meta::parser(|meta| {
            // Each argument once: a second would silently override the first.
            if let Some(name) = meta.path.get_ident().map(Ident::to_string) {
                if seen.contains(&name) {
                    return Err(meta.error(format!("`{name}` is given twice: keep one")));
                }
                seen.push(name);
            }
            if meta.path.is_ident("base") {
                out.pinned_base = Some(meta.value()?.parse()?);
                Ok(())
            } else if meta.path.is_ident("reserve") {
                let n: LitInt = meta.value()?.parse()?;
                match n.base10_parse::<u64>() {
                    Ok(v) if (1..=MAX_RESERVE).contains(&v) && n.suffix().is_empty() => {
                        out.reserve = Some(LitInt::new(&v.to_string(), n.span()));
                        Ok(())
                    }
                    _ => Err(syn::Error::new(
                        n.span(),
                        format!(
                            "`reserve` is a number of bytes from 1 to {MAX_RESERVE}, without a \
                             suffix: the room each object keeps after its fields for the \
                             extension groups added later (`reserve = 16` holds a `u64` field)"
                        ),
                    )),
                }
            } else if meta.path.is_ident("upgrade") {
                let when: Ident = meta.value()?.parse()?;
                if when == "on_write" {
                    out.on_write = Some(when);
                    Ok(())
                } else if when == "on_read" {
                    Ok(())
                } else {
                    Err(syn::Error::new(
                        when.span(),
                        "`upgrade` is `on_read` (the default: an object that lacks extension \
                         groups is upgraded in the pool when first read) or `on_write` (it is \
                         read upgraded in DRAM and upgraded in the pool when written through \
                         `tx.ext_mut`)",
                    ))
                }
            } else {
                Err(meta.error(
                    "unknown `extendible` argument: the arguments are `reserve = N`, the bytes \
                     each object keeps for extension groups stored inline, `base = 0x…`, \
                     the layout fingerprint the base must keep \
                     (`<S as pgl::Persistent>::LAYOUT`), and `upgrade = on_read | on_write`, \
                     when an object that lacks groups is upgraded in the pool",
                ))
            }
        });
        if let Err(e) = syn::parse::Parser::parse2(parser, args) {
            cx.syn_error(e);
        }
        if let (Some(on_write), None) = (&out.on_write, &out.reserve) {
            cx.error_spanned_by(
                on_write,
                "`upgrade = on_write` needs a `reserve = N`: a read builds the groups an \
                 object lacks in a copy of it, which holds its reserve alone, so every group \
                 must fit there; add a reserve in the first version that stores the struct \
                 (it is part of the layout), or drop `upgrade = on_write`",
            );
        }
        out
    }
}

/// Where an accessor name reads: a base field, or field `field` of group `group`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loc {
    /// Base field `i` (index into `Model::base`).
    Base(usize),
    /// Field `field` of group `group` (1-based group, index into its fields).
    Group { group: usize, field: usize },
}

/// One extension field.
pub(crate) struct ExtField<'a> {
    /// The field as written (its `#[extension]` attribute is dropped on output).
    pub(crate) field: &'a Field,
    /// Its name.
    pub(crate) ident: &'a Ident,
    /// `init = ...`.
    pub(crate) init: Option<Expr>,
    /// `replaces = name`.
    pub(crate) replaces: Option<Ident>,
}

/// An `#[extendible]` struct.
pub(crate) struct Model<'a> {
    /// The struct as written.
    pub(crate) item: &'a ItemStruct,
    /// Its base fields, in order.
    pub(crate) base: Vec<&'a Field>,
    /// Its groups: `groups[k - 1]` is group `k`.
    pub(crate) groups: Vec<Vec<ExtField<'a>>>,
    /// For each version `j` (0 = base only, `j` = through group `j`): each accessor name
    /// and where it reads, in declaration order.
    pub(crate) names: Vec<Vec<(Ident, Loc)>>,
}

/// An `#[extension(...)]` attribute.
struct ExtAttr {
    group: Option<(usize, Span)>,
    init: Option<Expr>,
    replaces: Option<Ident>,
}

fn parse_ext_attr(cx: &Ctxt, attr: &syn::Attribute) -> ExtAttr {
    let mut out = ExtAttr {
        group: None,
        init: None,
        replaces: None,
    };
    let Meta::List(list) = &attr.meta else {
        cx.error_spanned_by(
            attr,
            "expected `#[extension(N, init = …)]`, where `N` is the extension group (1, 2, …)",
        );
        return out;
    };
    let parsed = list.parse_args_with(|input: syn::parse::ParseStream<'_>| {
        let n: LitInt = input.parse()?;
        match n.base10_parse::<usize>() {
            // `base10_parse` ignores a suffix: `1x` would silently be group 1.
            Ok(_) if !n.suffix().is_empty() => cx.error_spanned_by(
                &n,
                "expected the group number without a suffix, as in `#[extension(1, …)]`",
            ),
            Ok(0) => cx.error_spanned_by(&n, "extension groups are numbered from 1"),
            Ok(v) => out.group = Some((v, n.span())),
            Err(_) => {
                cx.error_spanned_by(&n, "expected the group number, as in `#[extension(1, …)]`")
            }
        }
        while !input.is_empty() {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            let key: Ident = input.parse()?;
            input.parse::<Token![=]>()?;
            if key == "init" {
                out.init = Some(input.parse()?);
            } else if key == "replaces" {
                out.replaces = Some(input.parse()?);
            } else {
                let _: Expr = input.parse()?;
                cx.error_spanned_by(
                    &key,
                    format!(
                        "unknown `extension` key `{key}`: the keys are `init = …` and \
                         `replaces = field`"
                    ),
                );
            }
        }
        Ok(())
    });
    if let Err(e) = parsed {
        cx.syn_error(e);
    }
    out
}

impl<'a> Model<'a> {
    /// Builds the model, reporting every mistake into `cx`.
    pub(crate) fn new(cx: &Ctxt, item: &'a ItemStruct) -> Model<'a> {
        let mut model = Model {
            item,
            base: Vec::new(),
            groups: Vec::new(),
            names: Vec::new(),
        };
        let syn::Fields::Named(fields) = &item.fields else {
            cx.error_spanned_by(
                &item.ident,
                "`#[extendible]` needs a struct with named fields: accessors are named after \
                 them",
            );
            return model;
        };
        let mut last_group = 0usize;
        for field in &fields.named {
            let Some(ident) = &field.ident else { continue };
            // Reported here, not by the derive on the rewritten structs: a user's `__pgl_ext`
            // or `__pgl_next` would clash with the link appended after it. The field is left
            // out of the model, so the structs emitted compile without it.
            if crate::ast::unraw(ident).starts_with(RESERVED_PREFIX) {
                let mut shown = field.clone();
                shown.attrs.clear();
                shown.vis = syn::Visibility::Inherited;
                cx.error_spanned_by(shown, reserved_name_message(&crate::ast::unraw(ident)));
                continue;
            }
            // Every build must lay the struct and its groups out alike: a pool outlives the
            // configuration of the program that wrote it.
            for cfg in field.attrs.iter().filter(|a| a.path().is_ident("cfg")) {
                cx.error_spanned_by(
                    cfg,
                    format!(
                        "`#[cfg]` on a field of an `#[extendible]` struct: its layout and its \
                         groups' are stored in the pool and must be the same in every build; \
                         keep `{}` in all of them (or move what varies out of the struct)",
                        crate::ast::unraw(ident)
                    ),
                );
            }
            let attrs: Vec<_> = field
                .attrs
                .iter()
                .filter(|a| a.path().is_ident("extension"))
                .collect();
            let Some(attr) = attrs.first() else {
                if last_group > 0 {
                    cx.error_spanned_by(
                        ident,
                        format!(
                            "field `{ident}` has no `#[extension]` but follows extension group \
                             {last_group}: the base fields come first and are frozen; give a new \
                             field `#[extension({})]`",
                            last_group + 1
                        ),
                    );
                } else {
                    model.base.push(field);
                }
                continue;
            };
            for extra in &attrs[1..] {
                cx.error_spanned_by(
                    extra,
                    "a field belongs to one extension group: remove this attribute",
                );
            }
            let ext = parse_ext_attr(cx, attr);
            let Some((n, span)) = ext.group else { continue };
            let group = if n == last_group || n == last_group + 1 {
                n
            } else if n > last_group + 1 {
                cx.error_at(
                    span,
                    if last_group == 0 {
                        format!(
                            "the first extension group is 1, not {n}: groups are numbered 1, 2, \
                             3, … in the order they were added"
                        )
                    } else {
                        format!(
                            "extension group {n} skips group {}: groups are numbered 1, 2, 3, … \
                             in the order they were added, so this one is `#[extension({})]`",
                            last_group + 1,
                            last_group + 1
                        )
                    },
                );
                continue;
            } else {
                cx.error_at(
                    span,
                    format!(
                        "extension group {n} comes after group {last_group}: list the groups in \
                         the order they were added (1, 2, 3, …), the fields of each together"
                    ),
                );
                continue;
            };
            if ext.init.is_none() {
                cx.error_spanned_by(
                    attr,
                    format!(
                        "extension field `{ident}` needs `init = …`: the value objects written by \
                         an older program get, a constant or a closure `|old| …` over the older \
                         fields"
                    ),
                );
            }
            last_group = group;
            if model.groups.len() < group {
                model.groups.push(Vec::new());
            }
            model.groups[group - 1].push(ExtField {
                field,
                ident,
                init: ext.init,
                replaces: ext.replaces,
            });
        }
        model.resolve_names(cx);
        model
    }

    /// Fills `names`, reporting `replaces` naming no field and names used twice.
    fn resolve_names(&mut self, cx: &Ctxt) {
        let mut names: Vec<(Ident, Loc)> = self
            .base
            .iter()
            .enumerate()
            .filter_map(|(i, f)| Some((f.ident.clone()?, Loc::Base(i))))
            .collect();
        self.names.push(names.clone());
        for (g, fields) in self.groups.iter().enumerate() {
            let before = names.clone();
            for (i, f) in fields.iter().enumerate() {
                let loc = Loc::Group {
                    group: g + 1,
                    field: i,
                };
                if let Some(old) = &f.replaces {
                    match lookup(&before, old) {
                        Some(target) => {
                            for (_, l) in names.iter_mut().filter(|(_, l)| *l == target) {
                                *l = loc;
                            }
                        }
                        None => {
                            let known: Vec<String> =
                                before.iter().map(|(n, _)| n.to_string()).collect();
                            cx.error_spanned_by(
                                old,
                                format!(
                                    "`replaces = {old}` names no field of the struct before \
                                     group {}: it names a base field or a field of an earlier \
                                     group ({})",
                                    g + 1,
                                    known.join(", ")
                                ),
                            );
                        }
                    }
                }
                match names.iter_mut().find(|(n, _)| same_name(n, f.ident)) {
                    Some((_, l)) if *l == loc => {}
                    Some(_) => cx.error_spanned_by(
                        f.ident,
                        format!(
                            "a field named `{}` exists already: name the new field differently, \
                             or give it `replaces = {}` to take its place",
                            f.ident, f.ident
                        ),
                    ),
                    None => names.push((f.ident.clone(), loc)),
                }
            }
            self.names.push(names.clone());
        }
    }

    /// Whether a base or group field is still read by some name in the last version.
    pub(crate) fn is_current(&self, loc: Loc) -> bool {
        self.names
            .last()
            .is_some_and(|names| names.iter().any(|(_, l)| *l == loc))
    }

    /// The field at `loc`.
    pub(crate) fn field(&self, loc: Loc) -> &'a Field {
        match loc {
            Loc::Base(i) => self.base[i],
            Loc::Group { group, field } => self.groups[group - 1][field].field,
        }
    }
}

fn lookup(names: &[(Ident, Loc)], name: &Ident) -> Option<Loc> {
    names
        .iter()
        .find(|(n, _)| same_name(n, name))
        .map(|(_, l)| *l)
}

/// Whether two identifiers name the same field (`r#foo` is `foo`).
fn same_name(a: &Ident, b: &Ident) -> bool {
    crate::ast::unraw(a) == crate::ast::unraw(b)
}
