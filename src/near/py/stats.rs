//! The near cache's counters and sizes for Python (`near_cache_stats()`).

use std::sync::atomic::Ordering;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::NearCache;
use crate::near::store::Flush;

impl NearCache {
    /// Counters and sizes, as a plain dict.
    pub(super) fn stats_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = &self.near.store.stats;
        let out = PyDict::new(py);
        let counters = [
            ("hits", &s.hits),
            ("misses", &s.misses),
            ("installs", &s.installs),
            ("own_writes_kept", &s.own_writes_kept),
            ("fill_waits", &s.fill_waits),
            ("fills_dropped", &s.fills_dropped),
            ("too_large", &s.too_large),
            ("invalidations", &s.invalidations),
            ("evictions", &s.evictions),
            ("expired", &s.expired),
            ("gate_trips", &s.gate_trips),
            ("gate_refusals", &s.gate_refusals),
            ("refreshes", &s.refreshes),
            ("admitted", &s.admitted),
            ("not_admitted", &s.not_admitted),
        ];
        for (name, counter) in counters {
            out.set_item(name, counter.load(Ordering::Relaxed))?;
        }
        let flushes = PyDict::new(py);
        for (i, (_, name)) in Flush::ALL.iter().enumerate() {
            flushes.set_item(*name, s.flushes[i].load(Ordering::Relaxed))?;
        }
        out.set_item("flushes", flushes)?;
        let (bytes, entries, pending, epoch) = self.near.store.size();
        out.set_item("bytes", bytes)?;
        out.set_item("entries", entries)?;
        out.set_item("fills_in_flight", pending)?;
        out.set_item("epoch", epoch)?;
        out.set_item("serving", self.near.serving())?;
        out.set_item("enabled", self.near.enabled())?;
        out.set_item("swapdb_watched", self.near.swapdb_watched())?;
        let admission = self.near.admission();
        out.set_item("admit_after", admission.map(|a| a.after))?;
        out.set_item("sketch_bytes", admission.map_or(0, |a| a.sketch.bytes()))?;
        Ok(out)
    }
}
