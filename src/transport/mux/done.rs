//! Where a command's outcome goes: an event loop's slot (async callers), the near cache's
//! code on the reader (its tracking connection), or nowhere (a handshake's replies).

use std::sync::Arc;

use crate::bridge::{LoopQueue, Slot};
use crate::errors::Result;
use crate::proto::Reply;

/// Who waits for one command.
pub enum Done {
    /// An awaitable: the slot, and the loop queue that wakes its task.
    Loop { slot: Arc<Slot>, queue: Arc<LoopQueue> },
    /// Nobody: the replies of a handshake sent without waiting for them (what the server
    /// offers is learnt from them), or of a reauthentication.
    Discard(Option<Arc<crate::offers::Offers>>),
    /// A call on the near cache's tracking connection: told each reply as it is read, then
    /// the whole outcome, both on the reader and in order with the connection's pushes.
    Ordered(Box<Ordered>),
}

/// Told each of a call's replies, with its place among them (a pipeline has several).
pub type Seen = Box<dyn FnMut(usize, &Reply) + Send>;

/// What an `Ordered` call runs as its replies are read.
pub struct Ordered {
    pub seen: Seen,
    pub then: Box<dyn FnOnce(Result<Reply>) + Send>,
}

impl Done {
    /// A call whose outcome goes to `then`, on the reader.
    pub fn then(then: impl FnOnce(Result<Reply>) + Send + 'static) -> Self {
        let seen: Seen = Box::new(|_, _| {});
        Done::Ordered(Box::new(Ordered { seen, then: Box::new(then) }))
    }

    /// Show one of the call's replies before the rest arrive.
    pub fn seen(&mut self, at: usize, reply: &Reply) {
        if let Done::Ordered(ordered) = self {
            (ordered.seen)(at, reply);
        }
    }
}

impl Done {
    /// Hand over the outcome.
    pub fn complete(self, outcome: Result<Reply>) {
        match self {
            Done::Loop { slot, queue } => slot.complete(outcome, &queue),
            Done::Discard(Some(offers)) => {
                if let Ok(replies) = outcome {
                    offers.learn_discarded(&replies);
                }
            }
            Done::Discard(None) => {}
            Done::Ordered(ordered) => (ordered.then)(outcome),
        }
    }
}
