//! The error gatherer of one derive invocation.
//!
//! Invariant: every check reports into the same [`Ctxt`] and keeps going, so that a user
//! sees all mistakes of a struct in one compile, each exactly once.

use std::cell::RefCell;
use std::fmt::Display;

use proc_macro2::Span;
use quote::ToTokens;

/// Collects the errors found while parsing and checking one derive input.
#[derive(Default)]
pub(crate) struct Ctxt {
    errors: RefCell<Vec<syn::Error>>,
}

impl Ctxt {
    /// An empty context.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Records an error that spans the given tokens (first to last token).
    pub(crate) fn error_spanned_by<T: ToTokens, M: Display>(&self, tokens: T, message: M) {
        self.errors
            .borrow_mut()
            .push(syn::Error::new_spanned(tokens.into_token_stream(), message));
    }

    /// Records an error at one span.
    pub(crate) fn error_at<M: Display>(&self, span: Span, message: M) {
        self.errors
            .borrow_mut()
            .push(syn::Error::new(span, message));
    }

    /// Records an error produced by a syn parser.
    pub(crate) fn syn_error(&self, error: syn::Error) {
        self.errors.borrow_mut().push(error);
    }

    /// All recorded errors combined into one, or `None` when the input was fine.
    pub(crate) fn into_error(self) -> Option<syn::Error> {
        let mut errors = self.errors.into_inner().into_iter();
        let mut combined = errors.next()?;
        for e in errors {
            combined.combine(e);
        }
        Some(combined)
    }
}
