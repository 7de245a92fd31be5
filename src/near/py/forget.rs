//! What a command sent through the cache drops from the store, by the command table
//! (src/commands.rs): nothing for a read or a control command, everything for a flush, the
//! tracked keys among its arguments for a write (and for a command without a row).

use pyo3::prelude::*;

use super::key_bytes;
use super::writes::{drops_keys, Drops};
use crate::commands::{self, Effect};
use crate::near::tracking::Near;

/// What a command sent through the cache drops from `near` (None: nothing, a read or a
/// control command, or a write of no key it tracks).
pub(super) fn drops_of<'a>(near: &Near, args: &'a [Bound<'_, PyAny>]) -> Option<Drops<&'a [u8]>> {
    let name = args.first().and_then(key_bytes)?;
    // What the command table says it does (src/commands.rs); a command without a row is taken
    // for a write.
    match commands::facts(name).map_or(Effect::Write, |facts| facts.effect) {
        Effect::Read | Effect::Control => None,
        Effect::Flush => Some(Drops::All),
        Effect::Write => drops_keys(near, args[1..].iter().filter_map(key_bytes)),
    }
}
