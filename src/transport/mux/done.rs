//! Where a command's outcome goes: an event loop's slot (async callers), or nowhere (a
//! handshake's replies).

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
        }
    }
}
