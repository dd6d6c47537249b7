//! The runtime side of `#[extendible]` structs (LEDS): the extension link, the trait the
//! attribute implements, groups kept inline in a reserve, the views of a group's fields,
//! the handles that show an object with all its groups, the lazy upgrade (and the eager
//! one over a whole pool), and the Reset and Manual retention models.

mod chain;
mod eager;
mod extendible;
mod group;
mod inline;
mod journal;
mod link;
mod migrate;
mod reset;
mod settle;
mod view;

#[doc(hidden)]
pub use chain::all_inline;
pub use eager::UPGRADE_BATCH;
#[doc(hidden)]
pub use extendible::{run_init, zeroed, ExtGroups, ExtPlaces};
pub use extendible::{Extendible, ExtendibleData, MAX_GROUPS};
#[doc(hidden)]
pub use group::{GroupPlace, GroupRef};
pub(crate) use inline::check_inline_count;
#[doc(hidden)]
pub use inline::{inline_places, ObjImage};
pub use link::ExtLink;
pub(crate) use link::{inline_count, separate};
pub use migrate::{Migration, PendingMigration, Remap};
pub use reset::{type_key, type_keys};
pub use view::{Ext, ExtMut};
