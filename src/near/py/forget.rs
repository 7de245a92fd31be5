//! What a command sent through the cache drops from the store, by the command table
//! (src/commands.rs): nothing for a read or a control command, everything for a flush, the
//! tracked keys among its arguments for a write (and for a command without a row).

use pyo3::prelude::*;

use super::{key_bytes, NearCache};
use crate::commands::{self, Effect};
use crate::near::store::Flush;

impl NearCache {
    /// Drop the tracked keys among a command's arguments; whether there were any.
    pub(super) fn forget_command(&self, command: &Bound<'_, PyAny>) -> PyResult<bool> {
        let items: Vec<Bound<'_, PyAny>> = command.try_iter()?.collect::<PyResult<_>>()?;
        self.forget_args(&items)
    }

    fn forget_args(&self, args: &[Bound<'_, PyAny>]) -> PyResult<bool> {
        let Some(name) = args.first().and_then(key_bytes) else { return Ok(false) };
        // What the command table says it does (src/commands.rs); a command without a row is
        // taken for a write.
        match commands::facts(name).map_or(Effect::Write, |facts| facts.effect) {
            Effect::Read | Effect::Control => return Ok(false),
            Effect::Flush => {
                self.near.store.flush(Flush::Own);
                return Ok(true);
            }
            Effect::Write => {}
        }
        let mut any = false;
        for arg in &args[1..] {
            if let Some(bytes) = key_bytes(arg) {
                if self.near.tracks(bytes) {
                    self.near.forget(bytes);
                    any = true;
                }
            }
        }
        Ok(any)
    }
}
