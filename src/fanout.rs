//! Blocking calls to several servers at once (a cluster's get_many from sync code): every
//! request is written before any reply is read, so the servers work in parallel.

use pyo3::prelude::*;
use pyo3::types::PyList;
use redis::Pipeline;

use crate::client::{command_from, fanout_sync, Client};
use crate::errors::guard;
use crate::reply;

/// Run one pipeline per (client, commands) pair, all at once; return, in order, each one's
/// replies (a list in which an error reply is a `ResponseError` instance) or, for a pipeline
/// that failed as a whole (connection lost, timeout), the exception instance. Raises nothing
/// for the servers' sake: the caller decides what to retry.
#[pyfunction]
pub fn fanout<'py>(
    py: Python<'py>,
    calls: Vec<(Py<Client>, Bound<'py, PyAny>)>,
) -> PyResult<Bound<'py, PyList>> {
    guard(|| {
        let mut pipes: Vec<(&Client, Pipeline)> = Vec::with_capacity(calls.len());
        for (client, commands) in &calls {
            let mut pipe = Pipeline::new();
            for args in commands.try_iter()? {
                pipe.add_command(command_from(&args?)?);
            }
            pipes.push((client.get(), pipe));
        }
        let outcomes = py.detach(|| fanout_sync(&pipes));
        let out = PyList::empty(py);
        for outcome in outcomes {
            match outcome {
                Ok(reply) => out.append(reply::to_py_results(py, reply)?)?,
                Err(err) => out.append(PyErr::from(err).into_value(py))?,
            }
        }
        Ok(out)
    })
}
