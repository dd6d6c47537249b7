//! `#[extendible]`: rewrites a struct into its frozen base (with the hidden link to its
//! first extension group appended), one persistent struct per extension group (each ending
//! with the link to the next), the `<Struct>Data` of every current field, the
//! `<Struct>ExtFields` accessors of extension fields, and the `Extendible` impl the
//! runtime's lazy upgrade drives.
//!
//! Invariant: the base keeps exactly the fields without `#[extension]`, in order, so its
//! layout fingerprint is the one every earlier version stored; a group's fields never
//! change once written (the runtime reports a changed group as a layout mismatch naming
//! it). When the attribute finds a mistake it emits the errors and the base struct alone
//! (extension fields dropped), so the mistake is reported once.

use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{Expr, ItemStruct, Type, Visibility};

use crate::ctxt::Ctxt;
use crate::expand::handle;
use crate::extension::{Args, Loc, Model};

/// Expands `#[extendible(args)]` on `input`.
pub(crate) fn expand(args: TokenStream, input: TokenStream) -> TokenStream {
    let item: ItemStruct = match syn::parse2(input.clone()) {
        Ok(item) => item,
        Err(_) => {
            // The item is emitted as written, so that its uses elsewhere cause no errors.
            let span = match syn::parse2::<syn::Item>(input.clone()) {
                Ok(syn::Item::Enum(e)) => Some(e.enum_token.span),
                Ok(syn::Item::Union(u)) => Some(u.union_token.span),
                _ => input.clone().into_iter().next().map(|t| t.span()),
            }
            .unwrap_or_else(proc_macro2::Span::call_site);
            let e = syn::Error::new(
                span,
                "`#[extendible]` applies to a `#[derive(Persistent)]` struct",
            )
            .into_compile_error();
            return quote!(#e #input);
        }
    };
    // `Self` in a field's type names the struct: spelled out, since the field's type is
    // also written into the types generated beside it (`<Struct>Data`, the groups, the
    // views), where `Self` would name those.
    let mut item = item;
    let (ident, generics) = (item.ident.clone(), item.generics.clone());
    for f in item.fields.iter_mut() {
        f.ty = crate::layout::replace_self_with(&f.ty, &ident, &generics);
    }
    let cx = Ctxt::new();
    let args = Args::parse(&cx, args);
    if !item.generics.params.is_empty() {
        cx.error_spanned_by(
            &item.generics,
            "an `#[extendible]` struct cannot be generic: its groups are separate persistent \
             types, one per struct; make a non-generic struct for each use",
        );
    }
    let derived = derives_persistent(&item);
    if !derived {
        cx.error_spanned_by(
            &item.ident,
            "`#[extendible]` needs `#[derive(Persistent)]` (and `#[repr(C)]`) below it on the \
             same struct; a derive above `#[extendible]` goes below it",
        );
    }
    let model = Model::new(&cx, &item);
    check_accessor_names(&cx, &model);
    match cx.into_error() {
        Some(e) => {
            let e = e.into_compile_error();
            let base = base_struct(&model, derived, args.reserve.as_ref());
            quote!(#e #base)
        }
        None => Gen::new(&model).all(args),
    }
}

/// Reports two current fields whose accessors would have the same name, where at least
/// one of them is an extension field (`<Struct>ExtFields`): two base fields are the
/// derive's to report (`handle::check`), on the base struct. A clash inside
/// `<Struct>ExtFields` would be rustc's "defined multiple times", one between it and
/// `<Struct>Fields` an ambiguity at every call.
fn check_accessor_names(cx: &Ctxt, model: &Model<'_>) {
    let Some(names) = model.names.last() else {
        return;
    };
    // `<Struct>Fields` has no accessors for a packed struct (see `handle`).
    let packed = crate::attr::Container::from_ast(&Ctxt::new(), &model.item.attrs)
        .repr
        .packed
        .is_some();
    let mut seen: std::collections::BTreeMap<String, (String, bool)> = Default::default();
    for (name, loc) in names {
        let field = model.field(*loc);
        let in_group = matches!(loc, Loc::Group { .. });
        if !handle::visible_enough(&field.vis, &model.item.vis) || (!in_group && packed) {
            continue;
        }
        let bare = syn::ext::IdentExt::unraw(name).to_string();
        let mut methods = vec![bare.clone(), format!("set_{bare}"), format!("{bare}_mut")];
        if !in_group && matches!(field.ty, Type::Array(_)) {
            methods.extend([format!("{bare}_at"), format!("set_{bare}_at")]);
        }
        for method in methods {
            match seen.get(&method) {
                Some((other, other_in_group)) if in_group || *other_in_group => {
                    cx.error_spanned_by(
                        strip(field),
                        format!(
                            "fields `{other}` and `{bare}` would both have an accessor named \
                             `{method}` (in `{0}Fields` or `{0}ExtFields`): rename one of them",
                            crate::ast::unraw(&model.item.ident)
                        ),
                    );
                }
                Some(_) => {}
                None => {
                    seen.insert(method, (bare.clone(), in_group));
                }
            }
        }
    }
}

fn derives_persistent(item: &ItemStruct) -> bool {
    item.attrs.iter().any(|a| {
        a.path().is_ident("derive")
            && a.parse_args_with(
                syn::punctuated::Punctuated::<syn::Path, syn::Token![,]>::parse_terminated,
            )
            .is_ok_and(|paths| {
                paths
                    .iter()
                    .any(|p| p.segments.last().is_some_and(|s| s.ident == "Persistent"))
            })
    })
}

/// An item that fails to compile, at `span`, with `message` unless the constant `cond`
/// holds.
fn const_check(span: proc_macro2::Span, cond: TokenStream, message: &str) -> TokenStream {
    quote_spanned! {span=>
        const _: () = if !(#cond) {
            ::core::panic!(#message)
        };
    }
}

/// A field with its `#[extension]` attributes removed.
fn strip(field: &syn::Field) -> syn::Field {
    let mut f = field.clone();
    f.attrs.retain(|a| !a.path().is_ident("extension"));
    f
}

/// The base struct: the fields without `#[extension]` (those a group replaced become
/// private and accessor-less) and the link to group 1; with `reserve`, the hidden
/// attribute that gives its objects that many bytes after the value. Without `derived`
/// (the struct does not derive `Persistent`, an error already reported) it carries no
/// `#[pgl]` attributes, which only the derive declares.
fn base_struct(model: &Model<'_>, derived: bool, reserve: Option<&syn::LitInt>) -> TokenStream {
    let item = model.item;
    let attrs = &item.attrs;
    let vis = &item.vis;
    let ident = &item.ident;
    let no_accessors = derived.then(|| quote!(#[pgl(__no_accessors)]));
    let fields = model.base.iter().enumerate().map(|(i, f)| {
        let mut f = strip(f);
        if !model.is_current(Loc::Base(i)) && model.names.len() > 1 {
            f.vis = Visibility::Inherited;
            if derived {
                f.attrs.push(syn::parse_quote!(#[pgl(__no_accessors)]));
            }
            f.attrs.push(syn::parse_quote!(#[doc(hidden)]));
        }
        f
    });
    let extendible = derived.then(|| quote!(#[pgl(__extendible)]));
    let reserve = reserve
        .filter(|_| derived)
        .map(|n| quote!(#[pgl(__reserve = #n)]));
    quote! {
        #(#attrs)*
        #extendible
        #reserve
        #vis struct #ident {
            #(#fields,)*
            #no_accessors
            #[doc(hidden)]
            __pgl_ext: ::pgl::__private::ExtLink,
        }
    }
}

/// The code generator of a struct without mistakes.
struct Gen<'m, 'a> {
    m: &'m Model<'a>,
    ident: &'a Ident,
    vis: &'a Visibility,
    name: String,
    groups: usize,
}

impl<'m, 'a> Gen<'m, 'a> {
    fn new(m: &'m Model<'a>) -> Self {
        Gen {
            m,
            ident: &m.item.ident,
            vis: &m.item.vis,
            name: crate::ast::unraw(&m.item.ident),
            groups: m.groups.len(),
        }
    }

    fn group_ty(&self, k: usize) -> Ident {
        format_ident!("__Pgl{}Ext{}", self.name, k)
    }

    fn glue(&self, what: &str) -> Ident {
        format_ident!("__Pgl{}{}", self.name, what)
    }

    fn view_ty(&self, j: usize) -> Ident {
        format_ident!("__Pgl{}V{}", self.name, j)
    }

    /// Where group `k` lies in the reserve (`usize::MAX`: in an object of its own).
    fn inline_at(k: usize) -> TokenStream {
        let i = k - 1;
        quote!(<Self as ::pgl::__private::Extendible>::__INLINE_AT[#i])
    }

    fn g(k: usize) -> Ident {
        format_ident!("g{}", k)
    }

    /// The local that holds group `k`'s handle or oid in the glue's bodies. Not `g{k}`: a
    /// `let` pattern resolves to a constant or unit struct of that name in the user's
    /// scope, whatever its span.
    fn g_local(k: usize) -> Ident {
        format_ident!("__pgl_g{}", k)
    }

    /// The local that holds the value of current field `i` of `<Struct>Data` in `__alloc`
    /// (for the same reason, not the field's own name).
    fn data_local(i: usize) -> Ident {
        format_ident!("__pgl_d{}", i)
    }

    fn field_ty(&self, loc: Loc) -> &'a Type {
        &self.m.field(loc).ty
    }

    fn field_ident(&self, loc: Loc) -> &'a Ident {
        self.m.field(loc).ident.as_ref().expect("named fields only")
    }

    /// `self.base.f` / group `K`'s field `f` (by its offset), through `root` (`self` of
    /// an old view).
    fn read_path(&self, root: TokenStream, loc: Loc) -> TokenStream {
        let f = self.field_ident(loc);
        match loc {
            Loc::Base(_) => quote!(#root.base.#f),
            Loc::Group { group, .. } => {
                let g = Self::g(group);
                let gty = self.group_ty(group);
                let fty = self.field_ty(loc);
                quote!(*#root.#g.field::<#fty>(::core::mem::offset_of!(#gty, #f)))
            }
        }
    }

    fn all(&self, args: Args) -> TokenStream {
        let base = base_struct(self.m, true, args.reserve.as_ref());
        let data = self.data_struct();
        let ext_fields = self.ext_fields();
        let groups = (1..=self.groups).map(|k| self.group_struct(k));
        let views = (0..self.groups).map(|j| self.old_view(j));
        let glue = self.glue_structs();
        let imp = self.extendible_impl(args.on_write.as_ref());
        let pinned = self.pinned(args);
        quote! {
            #base
            #data
            #ext_fields
            // The groups and views repeat the user's fields: their names and deprecations
            // are the user's to lint, at the struct.
            #[allow(
                unused_qualifications,
                clippy::use_self,
                clippy::unused_unit,
                non_camel_case_types,
                non_snake_case,
                deprecated,
                dead_code
            )]
            const _: () = {
                #(#groups)*
                #(#views)*
                #glue
                #imp
                #pinned
            };
        }
    }

    /// With `upgrade = on_write`: its constant, and the check that every group is kept
    /// in the reserve (where the view upgraded in DRAM reads it), at `on_write`.
    fn upgrade_policy(&self, on_write: Option<&Ident>) -> (TokenStream, TokenStream) {
        let Some(on_write) = on_write else {
            return Default::default();
        };
        let ident = self.ident;
        let message = format!(
            "`#[extendible(upgrade = on_write)]`: an extension group of `{}` is not kept in \
             its reserve (it does not fit, or it is past the most groups a reserve holds), and \
             `on_write` needs every group there (a read builds the missing groups in a copy \
             of the object, which holds its reserve alone); drop `upgrade = on_write` from \
             this version (its objects are then upgraded when read), or keep the new fields \
             within the `reserve = N` the first version set",
            self.name,
        );
        (
            quote_spanned!(on_write.span()=> const __UPGRADE_ON_WRITE: bool = true;),
            const_check(
                on_write.span(),
                quote!(::pgl::__private::all_inline::<#ident>()),
                &message,
            ),
        )
    }

    fn pinned(&self, args: Args) -> TokenStream {
        let Some(lit) = args.pinned_base else {
            return TokenStream::new();
        };
        let ident = self.ident;
        let message = format!(
            "the base of `{}` no longer has the layout pinned by `#[extendible(base = {lit})]`: \
             the fields without `#[extension]` and the `reserve = N` must stay as they were \
             when objects were first stored; add new fields in a new `#[extension(N)]` group",
            self.name
        );
        const_check(
            lit.span(),
            quote!(<#ident as ::pgl::__private::Persistent>::LAYOUT == #lit),
            &message,
        )
    }

    /// The struct of group `k`: its fields, then the link to group `k + 1`.
    fn group_struct(&self, k: usize) -> TokenStream {
        let vis = self.vis;
        let ty = self.group_ty(k);
        let doc = format!(
            "Extension group {k} of `{}` (generated by `#[extendible]`).",
            self.name
        );
        // Accessors are `<Struct>ExtFields`, on the views of the whole object.
        let fields = self.m.groups[k - 1].iter().map(|f| {
            let mut f = strip(f.field);
            f.attrs.push(syn::parse_quote!(#[pgl(__no_accessors)]));
            f
        });
        let ident = self.ident;
        let k_lit = syn::LitInt::new(&format!("{k}u64"), proc_macro2::Span::call_site());
        quote! {
            #[doc = #doc]
            #[derive(::pgl::Persistent)]
            #[pgl(__group_of(#ident, #k_lit))]
            #[repr(C)]
            #vis struct #ty {
                #(#fields,)*
                #[pgl(__no_accessors)]
                __pgl_next: ::pgl::__private::ExtLink,
            }
        }
    }

    /// `<Struct>Data`: every field a program of this version sees, for `tx.alloc_ext`.
    fn data_struct(&self) -> TokenStream {
        let vis = self.vis;
        let ty = format_ident!("{}Data", self.name, span = self.ident.span());
        let doc = format!(
            "Every field of [`{0}`] as this version defines it: the base fields (those an \
             extension replaced excepted) and the extension fields. `tx.alloc_ext({0}Data {{ … }})` \
             creates an object with its full chain of extension groups.",
            self.name
        );
        let fields = self.current().map(|loc| {
            let f = self.m.field(loc);
            let (attrs, fvis, ident, ty) = (&f.attrs, &f.vis, &f.ident, &f.ty);
            let attrs = attrs.iter().filter(|a| a.path().is_ident("doc"));
            quote!(#(#attrs)* #fvis #ident: #ty)
        });
        quote! {
            #[doc = #doc]
            #[allow(dead_code, non_snake_case)]
            #vis struct #ty {
                #(#fields,)*
            }
        }
    }

    /// The fields still read by some name in this version, base first, in order.
    fn current(&self) -> impl Iterator<Item = Loc> + '_ {
        let base = (0..self.m.base.len()).map(Loc::Base);
        let groups = self.m.groups.iter().enumerate().flat_map(|(g, fs)| {
            (0..fs.len()).map(move |field| Loc::Group {
                group: g + 1,
                field,
            })
        });
        base.chain(groups).filter(|l| self.m.is_current(*l))
    }

    /// The view an `init` closure of group `j + 1` reads: version `j`, by value.
    fn old_view(&self, j: usize) -> TokenStream {
        let ident = self.ident;
        let ty = self.view_ty(j);
        let gs: Vec<_> = (1..=j).map(Self::g).collect();
        let gtys: Vec<_> = (1..=j).map(|k| self.group_ty(k)).collect();
        let methods = self.m.names[j].iter().map(|(name, loc)| {
            let fty = self.field_ty(*loc);
            // `self` with the span of the method's `&self`: where the field's name comes
            // from another macro's expansion, two spans would be two hygiene contexts.
            let path = self.read_path(quote_spanned!(name.span()=> self), *loc);
            let doc = format!("`{name}` as version {j} stores it.");
            quote_spanned! {name.span()=>
                #[doc = #doc]
                #[inline]
                pub fn #name(&self) -> #fty
                where
                    for<'__pgl> #fty: ::core::marker::Copy + ::pgl::__private::Persistent,
                {
                    #path
                }
            }
        });
        quote! {
            /// A read view of an object as an older version of the struct stores it, for
            /// the `init` of the next extension group.
            pub struct #ty<'__pgl_a> {
                base: &'__pgl_a #ident,
                #(#gs: ::pgl::__private::GroupRef<'__pgl_a, #gtys>,)*
            }
            impl #ty<'_> {
                #(#methods)*
            }
        }
    }

    fn glue_structs(&self) -> TokenStream {
        if self.groups == 0 {
            return TokenStream::new();
        }
        let (reads, muts, refs, places) = (
            self.glue("Reads"),
            self.glue("Muts"),
            self.glue("Refs"),
            self.glue("Places"),
        );
        let vis = self.vis;
        let gs: Vec<_> = (1..=self.groups).map(Self::g).collect();
        let tys: Vec<_> = (1..=self.groups).map(|k| self.group_ty(k)).collect();
        let fields = self.field_methods();
        quote! {
            #[derive(Default)]
            #vis struct #reads<'__pgl_a> {
                #(pub #gs: ::core::option::Option<::pgl::__private::Read<'__pgl_a, #tys>>,)*
            }
            #vis struct #muts<'__pgl_a> {
                #(pub #gs: ::core::option::Option<::pgl::__private::Mut<'__pgl_a, #tys>>,)*
            }
            #vis struct #refs<'__pgl_a> { #(pub #gs: ::pgl::__private::GroupRef<'__pgl_a, #tys>,)* }
            #vis struct #places<'__pgl_a> { #(pub #gs: ::pgl::__private::GroupPlace<'__pgl_a, #tys>,)* }
            #fields
        }
    }

    /// Each group field's reference and place, by the field's name, as methods of the
    /// `Refs` and `Places` glue (which can name the group's struct; `<Struct>ExtFields`,
    /// outside this block, cannot).
    fn field_methods(&self) -> TokenStream {
        let (refs, places) = (self.glue("Refs"), self.glue("Places"));
        let mut by_ref = Vec::new();
        let mut by_place = Vec::new();
        for (k, fields) in self.m.groups.iter().enumerate() {
            let g = Self::g(k + 1);
            let gty = self.group_ty(k + 1);
            for f in fields {
                let (fi, ty) = (f.ident, &f.field.ty);
                let at = quote!(::core::mem::offset_of!(#gty, #fi));
                let bound = quote!(where for<'__pgl> #ty: ::pgl::__private::Persistent);
                // By value, as the place's: a method call tries `self` receivers before
                // `&self` ones, so a `&self` method here would lose to any trait method of
                // the same name taking `self` (`Into::into` for a field named `into`).
                by_ref.push(quote! {
                    #[inline(always)]
                    pub fn #fi(self) -> &'__pgl_a #ty #bound {
                        self.#g.field::<#ty>(#at)
                    }
                });
                by_place.push(quote! {
                    #[inline(always)]
                    pub fn #fi(self) -> ::pgl::__private::Place<'__pgl_a, #ty> #bound {
                        self.#g.field::<#ty>(#at)
                    }
                });
            }
        }
        quote! {
            impl<'__pgl_a> #refs<'__pgl_a> { #(#by_ref)* }
            impl<'__pgl_a> #places<'__pgl_a> { #(#by_place)* }
        }
    }

    /// The value of extension field `f` of group `k` for an object of version `k - 1`,
    /// with the old view bound to `__pgl_old`. The user's `init` always runs inside a
    /// closure, so no `return` or `?` in it leaves the generated upgrade.
    fn init_value(&self, k: usize, i: usize) -> TokenStream {
        let f = &self.m.groups[k - 1][i];
        let ty = &f.field.ty;
        let Some(init) = &f.init else {
            return quote!(::pgl::__private::zeroed::<#ty>());
        };
        match crate::attr::ungrouped(init) {
            Expr::Closure(c) => {
                let mut c = c.clone();
                if matches!(c.output, syn::ReturnType::Default) {
                    let body = &c.body;
                    let span = body.span();
                    c.output = syn::parse_quote_spanned!(span=> -> #ty);
                    let block: Expr = syn::parse_quote_spanned!(span=> { #body });
                    *c.body = block;
                }
                quote!(::pgl::__private::run_init(&__pgl_old, #c))
            }
            // A closure too: spliced into `__upgrade` as it stands, a `return Ok(off)` (or
            // `?`) in the expression would leave the upgrade with any offset as the new
            // group's, and the runtime would link another object's group to this one.
            // `__pgl_old` keeps the span of its binding (an identifier spanned like the
            // user's expression would not name it where that expression comes from another
            // macro's expansion).
            e => {
                let old = quote!(__pgl_old);
                quote_spanned!(e.span()=> ::pgl::__private::run_init(&#old, |_| -> #ty { #e }))
            }
        }
    }

    fn extendible_impl(&self, on_write: Option<&Ident>) -> TokenStream {
        let ident = self.ident;
        let (policy, policy_check) = self.upgrade_policy(on_write);
        let n = self.groups;
        let data = format_ident!("{}Data", self.name);
        let tx = quote!(::pgl::__private::Tx<'_>);
        let res = quote!(::pgl::__private::Result);
        let oid = quote!(::pgl::__private::Oid);
        let link = quote!(::pgl::__private::ExtLink);
        // Paths, not the prelude's names: the user's scope may hold other `Ok`, `Some` or
        // `None` (a glob import of an enum's variants), or no prelude at all.
        let ok = quote!(::core::result::Result::Ok);
        let some = quote!(::core::option::Option::Some);
        let none = quote!(::core::option::Option::None);
        let gs: Vec<_> = (1..=n).map(Self::g).collect();
        let locals: Vec<_> = (1..=n).map(Self::g_local).collect();
        let tys: Vec<_> = (1..=n).map(|k| self.group_ty(k)).collect();
        let ks: Vec<_> = (1..=n).collect();

        let (reads, muts, refs, places) = if n == 0 {
            (quote!(()), quote!(()), quote!(()), quote!(()))
        } else {
            let (r, m, f, p) = (
                self.glue("Reads"),
                self.glue("Muts"),
                self.glue("Refs"),
                self.glue("Places"),
            );
            (
                quote!(#r<'__pgl_a>),
                quote!(#m<'__pgl_a>),
                quote!(#f<'__pgl_a>),
                quote!(#p<'__pgl_a>),
            )
        };
        let (mk_reads, mk_muts, mk_refs_r, mk_refs_m, mk_places) = if n == 0 {
            let unit = quote!(());
            (
                quote!(#ok(#some(()))),
                quote!(#ok(#some(()))),
                unit.clone(),
                unit.clone(),
                unit,
            )
        } else {
            let (r, m, f, p) = (
                self.glue("Reads"),
                self.glue("Muts"),
                self.glue("Refs"),
                self.glue("Places"),
            );
            // Each separate group's handle (`get` or `open`), found by following the links
            // from the base's; none for the inline ones; `None` where the chain ends early.
            let follow = |method: &str, handles: &Ident| {
                let method = Ident::new(method, proc_macro2::Span::call_site());
                quote! {
                    let mut __pgl_link = __pgl_link;
                    #(
                        let #locals = if #ks <= __pgl_inline {
                            __pgl_tx.__inline_layout::<#tys>(false)?;
                            #none
                        } else {
                            if __pgl_link == 0 {
                                return #ok(#none);
                            }
                            let __pgl_h = __pgl_tx.#method(#oid::<#tys>::from_raw(__pgl_link))?;
                            __pgl_link = __pgl_h.__pgl_next.get();
                            #some(__pgl_h)
                        };
                    )*
                    let _ = __pgl_link;
                    #ok(#some(#handles { #(#gs: #locals,)* }))
                }
            };
            let inline_at: Vec<_> = (1..=n).map(Self::inline_at).collect();
            // The same for read handles and micro-buffers: both deref to the group, and
            // both base handles show the reserve.
            let group_ref = quote!(::pgl::__private::GroupRef);
            let refs = |inline: TokenStream| {
                quote!(#f { #(#gs: match &__pgl_h.#gs {
                    #some(__pgl_r) => #group_ref::of(&**__pgl_r),
                    #none => #group_ref::#inline(__pgl_b, #inline_at),
                },)* })
            };
            (
                follow("get", &r),
                follow("open", &m),
                refs(quote!(inline)),
                refs(quote!(inline_of_mut)),
                // SAFETY (of each `GroupPlace::inline`): the offsets are `inline_places`'s,
                // so each inline group lies in the reserve, aligned, apart from the others
                // and from the value; each is made once here, and the views borrow the base
                // handle (`'__pgl_a`) as long as they live.
                quote!(#p { #(#gs: match &mut __pgl_h.#gs {
                    #some(__pgl_m) => ::pgl::__private::GroupPlace::of(__pgl_m.place()),
                    #none => unsafe { ::pgl::__private::GroupPlace::inline(&mut *__pgl_b, #inline_at) },
                },)* }),
            )
        };

        // Upgrades: group k from the view of version k - 1.
        let upgrades = (1..=n).map(|k| {
            let view = self.view_ty(k - 1);
            let prev: Vec<_> = (1..k).map(Self::g).collect();
            let prev_locals: Vec<_> = (1..k).map(Self::g_local).collect();
            let prev_tys: Vec<_> = (1..k).map(|j| self.group_ty(j)).collect();
            let prev_at: Vec<_> = (0..k - 1)
                .map(|i| quote!(__pgl_groups.get(#i).copied().unwrap_or(0)))
                .collect();
            let prev_handles: Vec<_> = (1..k).map(|j| format_ident!("__pgl_h{}", j)).collect();
            let prev_inline: Vec<_> = (1..k).map(Self::inline_at).collect();
            let ty = self.group_ty(k);
            let at = Self::inline_at(k);
            let fields = self.m.groups[k - 1].iter().enumerate().map(|(i, f)| {
                let fi = f.ident;
                let v = self.init_value(k, i);
                quote!(#fi: #v)
            });
            quote! {
                #k => {
                    let __pgl_value = {
                        #(
                            let #prev_handles;
                            let #prev_locals: ::pgl::__private::GroupRef<'_, #prev_tys> = match #prev_at {
                                0 => {
                                    __pgl_tx.__inline_layout::<#prev_tys>(false)?;
                                    __pgl_image.group::<#prev_tys>(#prev_inline)?
                                }
                                __pgl_off => {
                                    #prev_handles = __pgl_tx.get(#oid::<#prev_tys>::from_raw(__pgl_off))?;
                                    ::pgl::__private::GroupRef::of(&*#prev_handles)
                                }
                            };
                        )*
                        let __pgl_old = #view {
                            base: __pgl_image.value::<Self>()?,
                            #(#prev: #prev_locals,)*
                        };
                        #ty { #(#fields,)* __pgl_next: #link::NULL }
                    };
                    if __pgl_inline {
                        __pgl_tx.__inline_layout::<#ty>(true)?;
                        let __pgl_at = #at;
                        __pgl_image.put_group(__pgl_at, &__pgl_value)?;
                        #ok(0)
                    } else {
                        #ok(__pgl_tx.alloc(__pgl_value)?.raw())
                    }
                }
            }
        });

        // A new object: groups from the last to the first, each linked to the next.
        let current: Vec<Loc> = self.current().collect();
        let data_fields: Vec<&Ident> = current.iter().map(|l| self.field_ident(*l)).collect();
        let data_locals: Vec<Ident> = (0..current.len()).map(Self::data_local).collect();
        let data_local = |loc: Loc| current.iter().position(|l| *l == loc).map(Self::data_local);
        let allocs = (1..=n).rev().map(|k| {
            let ty = self.group_ty(k);
            let g = Self::g_local(k);
            let at = Self::inline_at(k);
            let fields = self.m.groups[k - 1].iter().enumerate().map(|(i, f)| {
                let fi = f.ident;
                if let Some(local) = data_local(Loc::Group { group: k, field: i }) {
                    quote!(#fi: #local)
                } else {
                    let fty = &f.field.ty;
                    quote!(#fi: ::pgl::__private::zeroed::<#fty>())
                }
            });
            quote! {
                let mut #g = #ty { #(#fields,)* __pgl_next: #link::NULL };
                match #at {
                    ::core::primitive::usize::MAX => {
                        #g.__pgl_next = #link::new(__pgl_next);
                        __pgl_next = __pgl_tx.alloc(#g)?.raw();
                    }
                    __pgl_at => {
                        __pgl_tx.__inline_layout::<#ty>(true)?;
                        __pgl_image.put_group(__pgl_at, &#g)?;
                        __pgl_inline += 1;
                    }
                }
            }
        });
        let base_fields = self.m.base.iter().enumerate().map(|(i, f)| {
            let fi = f.ident.as_ref().expect("named");
            if let Some(local) = data_local(Loc::Base(i)) {
                quote!(#fi: #local)
            } else {
                let fty = &f.ty;
                quote!(#fi: ::pgl::__private::zeroed::<#fty>())
            }
        });

        quote! {
            impl ::pgl::__private::ExtendibleData for #data {
                type Struct = #ident;
            }
            // The glue keeps `Extendible`'s safety contract: the struct ends with the link
            // `base_struct` appended, each group with `__pgl_next`; `__muts` opens the
            // groups of the chain from the link it is given, `__set_next` group `k` at the
            // offset it is given, `__alloc` the groups it has just allocated, and
            // `__upgrade` only reads groups (`get`) and returns the offset of the one it
            // allocates, or 0 for one it put inline (the inits run in closures: no
            // `return` leaves it); `__INLINE_AT` is `inline_places`'s, and inline groups
            // are reached only at its offsets, through the base handle given.
            #[automatically_derived]
            unsafe impl ::pgl::__private::Extendible for #ident {
                type Data = #data;
                type Reads<'__pgl_a> = #reads;
                type Muts<'__pgl_a> = #muts;
                type Refs<'__pgl_a> = #refs;
                type Places<'__pgl_a> = #places;
                const GROUPS: usize = #n;
                #policy
                const GROUP_KEYS: &'static [(u32, u64)] = &[#((
                    <#tys as ::pgl::__private::Persistent>::TYPE_ID,
                    <#tys as ::pgl::__private::Persistent>::LAYOUT,
                )),*];
                const __INLINE_AT: &'static [usize] = &::pgl::__private::inline_places(
                    ::core::mem::size_of::<Self>(),
                    <Self as ::pgl::__private::Persistent>::__RESERVE,
                    [#((::core::mem::size_of::<#tys>(), ::core::mem::align_of::<#tys>())),*],
                );

                #[inline]
                fn __link(&self) -> u64 {
                    self.__pgl_ext.get()
                }

                fn __next(__pgl_tx: &#tx, __pgl_k: usize, __pgl_off: u64) -> #res<u64> {
                    match __pgl_k {
                        #(#ks => #ok(__pgl_tx.get(#oid::<#tys>::from_raw(__pgl_off))?.__pgl_next.get()),)*
                        _ => #ok(0),
                    }
                }

                // Inlined into `read_through`, which runs it on every read of an
                // object shown upgraded in DRAM (`upgrade = on_write`).
                #[inline]
                fn __upgrade(
                    __pgl_tx: &#tx,
                    __pgl_k: usize,
                    __pgl_image: &mut ::pgl::__private::ObjImage,
                    __pgl_groups: &[u64],
                    __pgl_inline: bool,
                ) -> #res<u64> {
                    let _ = (&__pgl_image, __pgl_groups, __pgl_inline);
                    match __pgl_k {
                        #(#upgrades)*
                        _ => #ok(0),
                    }
                }

                fn __set_next(
                    __pgl_tx: &#tx,
                    __pgl_k: usize,
                    __pgl_off: u64,
                    __pgl_to: u64,
                ) -> #res<()> {
                    match __pgl_k {
                        #(#ks => {
                            let mut __pgl_m = __pgl_tx.open(#oid::<#tys>::from_raw(__pgl_off))?;
                            ::pgl::__private::AsPlace::place(&mut __pgl_m)
                                .project(|__pgl_w| &__pgl_w.__pgl_next)
                                .set(#link::new(__pgl_to));
                            #ok(())
                        })*
                        _ => #ok(()),
                    }
                }

                fn __alloc(__pgl_tx: &#tx, __pgl_data: #data) -> #res<#oid<Self>> {
                    let #data { #(#data_fields: #data_locals,)* } = __pgl_data;
                    let mut __pgl_image = ::pgl::__private::ObjImage::of::<Self>();
                    let mut __pgl_next: u64 = 0;
                    let mut __pgl_inline: usize = 0;
                    #(#allocs)*
                    let __pgl_ext = #link::__base(__pgl_next, __pgl_inline);
                    __pgl_tx.__alloc_linked(#ident { #(#base_fields,)* __pgl_ext }, &__pgl_image)
                }

                fn __reads<'__pgl_a>(
                    __pgl_tx: &'__pgl_a #tx,
                    __pgl_link: u64,
                    __pgl_inline: usize,
                ) -> #res<::core::option::Option<Self::Reads<'__pgl_a>>> {
                    let _ = (__pgl_tx, __pgl_link, __pgl_inline);
                    #mk_reads
                }

                fn __muts<'__pgl_a>(
                    __pgl_tx: &'__pgl_a #tx,
                    __pgl_link: u64,
                    __pgl_inline: usize,
                ) -> #res<::core::option::Option<Self::Muts<'__pgl_a>>> {
                    let _ = (__pgl_tx, __pgl_link, __pgl_inline);
                    #mk_muts
                }

                fn __refs_of_reads<'__pgl_a>(
                    __pgl_b: &'__pgl_a ::pgl::__private::Read<'_, Self>,
                    __pgl_h: &'__pgl_a Self::Reads<'_>,
                ) -> Self::Refs<'__pgl_a> {
                    let _ = (__pgl_b, __pgl_h);
                    #mk_refs_r
                }

                fn __refs_of_muts<'__pgl_a>(
                    __pgl_b: &'__pgl_a ::pgl::__private::Mut<'_, Self>,
                    __pgl_h: &'__pgl_a Self::Muts<'_>,
                ) -> Self::Refs<'__pgl_a> {
                    let _ = (__pgl_b, __pgl_h);
                    #mk_refs_m
                }

                fn __places<'__pgl_a>(
                    __pgl_b: &'__pgl_a mut ::pgl::__private::Mut<'_, Self>,
                    __pgl_h: &'__pgl_a mut Self::Muts<'_>,
                ) -> Self::Places<'__pgl_a> {
                    let _ = (&__pgl_b, &__pgl_h);
                    #mk_places
                }
            }
            #policy_check
        }
    }

    /// `<Struct>ExtFields`: getter, setter and place of every name that reads a group field
    /// at least as visible as the struct.
    fn ext_fields(&self) -> TokenStream {
        let Some(names) = self.m.names.last() else {
            return TokenStream::new();
        };
        let ident = self.ident;
        let vis = self.vis;
        let trait_name = format_ident!("{}ExtFields", self.name, span = ident.span());
        let groups = quote!(::pgl::__private::ExtGroups<#ident>);
        let places = quote!(::pgl::__private::ExtPlaces<#ident>);
        let value = Ident::new("__pgl_value", proc_macro2::Span::mixed_site());
        let methods: Vec<_> = names
            .iter()
            .filter_map(|(name, loc)| {
                let Loc::Group { group, .. } = *loc else {
                    return None;
                };
                // As in `<Struct>Fields`: a field less visible than the struct (and so than
                // this trait) gets no accessor.
                if !handle::visible_enough(&self.m.field(*loc).vis, self.vis) {
                    return None;
                }
                let f = self.field_ident(*loc);
                let ty = self.field_ty(*loc);
                let bare = syn::ext::IdentExt::unraw(name);
                let setter = format_ident!("set_{}", bare);
                let place_fn = format_ident!("{}_mut", bare);
                let get_doc = format!("`{name}` (extension group {group}), read in place.");
                let set_doc = format!(
                    "Sets `{name}` (extension group {group}), marking only its bytes modified."
                );
                let place_doc = format!("The place of `{name}` (extension group {group}).");
                Some(quote_spanned! {name.span()=>
                    #[doc = #get_doc]
                    #[inline]
                    fn #name(&self) -> &#ty
                    where
                        for<'__pgl> #ty: ::pgl::__private::Persistent,
                    {
                        <Self as #groups>::__groups(self).#f()
                    }
                    #[doc = #set_doc]
                    #[inline]
                    fn #setter(&mut self, #value: #ty)
                    where
                        Self: #places,
                        for<'__pgl> #ty: ::pgl::__private::Persistent,
                    {
                        <Self as #places>::__places(self).#f().set(#value)
                    }
                    #[doc = #place_doc]
                    #[inline]
                    fn #place_fn(&mut self) -> ::pgl::__private::Place<'_, #ty>
                    where
                        Self: #places,
                        for<'__pgl> #ty: ::pgl::__private::Persistent,
                    {
                        <Self as #places>::__places(self).#f()
                    }
                })
            })
            .collect();
        if methods.is_empty() {
            return TokenStream::new();
        }
        let doc = format!(
            "Accessors of the extension fields of [`{0}`] (and of base fields an extension \
             replaced), generated by `#[extendible]`: getters on `tx.ext(oid)` and \
             `tx.ext_mut(oid)`, setters and places on `tx.ext_mut(oid)`. Bring the trait into \
             scope to use them; base fields keep their accessors in `{0}Fields`.",
            self.name
        );
        let _ = ToTokens::to_token_stream(&ident);
        quote! {
            #[doc = #doc]
            #[allow(
                dead_code,
                non_snake_case,
                deprecated,
                clippy::wrong_self_convention,
                clippy::must_use_candidate
            )]
            #vis trait #trait_name: #groups {
                #(#methods)*
            }
            #[automatically_derived]
            impl<__PglView: ?::core::marker::Sized + #groups> #trait_name for __PglView {}
        }
    }
}
