//! Which command a reply belongs to. RESP answers strictly in order, so the commands waiting
//! on a connection form a FIFO and every reply is the oldest one's (a pipeline's N replies
//! all go to it before the next command gets any).

use std::collections::VecDeque;

use redis::Value;

use crate::errors::Error;
use crate::proto::Replies;

/// A reply arrived that no command was waiting for: the connection is out of step.
#[derive(Debug, PartialEq, Eq)]
pub struct Unsolicited;

struct Entry<W> {
    waiter: W,
    replies: Replies,
    got: Vec<Value>,
}

/// The commands written (or queued to be written) on one connection, oldest first.
pub struct Fifo<W> {
    entries: VecDeque<Entry<W>>,
}

impl<W> Fifo<W> {
    /// An empty FIFO.
    pub fn new() -> Self {
        Fifo { entries: VecDeque::new() }
    }

    /// Whether no command is waiting.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Queue a command's waiter. A request that gets no reply at all is answered at once (an
    /// empty list) and never queued: waiting, it would take the next command's reply.
    pub fn push(&mut self, waiter: W, replies: Replies) -> Option<(W, Value)> {
        if replies.count() == 0 {
            return Some((waiter, Value::Array(Vec::new())));
        }
        self.entries.push_back(Entry { waiter, replies, got: Vec::new() });
        None
    }

    /// Queue a waiter in front of all the others (for bytes written before theirs).
    pub fn push_front(&mut self, waiter: W, replies: Replies) {
        self.entries.push_front(Entry { waiter, replies, got: Vec::new() });
    }

    /// Give a reply to the oldest waiter; return that waiter with its whole answer once this
    /// reply completes it (one value, or the list of a pipeline's replies).
    pub fn deliver(&mut self, value: Value) -> Result<Option<(W, Value)>, Unsolicited> {
        self.deliver_seen(value, |_, _, _| {})
    }

    /// `deliver`, showing the reply first to its waiter (`seen`, with its place among the
    /// waiter's replies).
    pub fn deliver_seen(
        &mut self,
        value: Value,
        seen: impl FnOnce(&mut W, usize, &Value),
    ) -> Result<Option<(W, Value)>, Unsolicited> {
        let front = self.entries.front_mut().ok_or(Unsolicited)?;
        seen(&mut front.waiter, front.got.len(), &value);
        let answer = match front.replies {
            Replies::One => value,
            Replies::Many(n) => {
                front.got.push(value);
                if front.got.len() < n {
                    return Ok(None);
                }
                Value::Array(std::mem::take(&mut front.got))
            }
        };
        Ok(self.entries.pop_front().map(|entry| (entry.waiter, answer)))
    }

    /// Give each of a connection's replies to its waiter, in order: the waiters answered with
    /// their whole answers, and an error if a reply came that no command was waiting for (the
    /// connection at `addr` is out of step; the replies after it are dropped).
    pub fn deliver_all(
        &mut self,
        values: Vec<Value>,
        addr: &str,
    ) -> (Vec<(W, Value)>, Option<Error>) {
        let mut answered = Vec::with_capacity(values.len());
        for value in values {
            match self.deliver(value) {
                Ok(Some(done)) => answered.push(done),
                Ok(None) => {}
                Err(Unsolicited) => {
                    let message = format!("Redis at {addr} sent a reply nobody asked for");
                    return (answered, Some(Error::Internal(message)));
                }
            }
        }
        (answered, None)
    }

    /// The oldest waiter.
    pub fn front(&self) -> Option<&W> {
        self.entries.front().map(|e| &e.waiter)
    }

    /// Every waiter, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &W> {
        self.entries.iter().map(|e| &e.waiter)
    }

    /// Every waiter, oldest first, to change.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut W> {
        self.entries.iter_mut().map(|e| &mut e.waiter)
    }

    /// The newest waiter (one that was just queued).
    pub fn back_mut(&mut self) -> Option<&mut W> {
        self.entries.back_mut().map(|e| &mut e.waiter)
    }

    /// Take back the newest waiter (one that was just queued).
    pub fn pop_back(&mut self) -> Option<W> {
        self.entries.pop_back().map(|e| e.waiter)
    }

    /// Take every waiter, oldest first, leaving the FIFO empty.
    pub fn take_all(&mut self) -> Vec<W> {
        std::mem::take(&mut self.entries).into_iter().map(|e| e.waiter).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deliver_all(
        fifo: &mut Fifo<&'static str>,
        values: Vec<Value>,
    ) -> Vec<(&'static str, Value)> {
        values.into_iter().filter_map(|v| fifo.deliver(v).unwrap()).collect()
    }

    #[test]
    fn replies_go_to_waiters_in_order() {
        let mut fifo = Fifo::new();
        assert!(fifo.push("a", Replies::One).is_none());
        assert!(fifo.push("b", Replies::One).is_none());
        assert_eq!(fifo.front(), Some(&"a"));
        let done = deliver_all(&mut fifo, vec![Value::Int(1), Value::Int(2)]);
        assert_eq!(done, vec![("a", Value::Int(1)), ("b", Value::Int(2))]);
        assert!(fifo.is_empty());
    }

    #[test]
    fn a_pipeline_of_n_collects_n_replies_before_the_next_waiter_gets_any() {
        let mut fifo = Fifo::new();
        fifo.push("pipe", Replies::Many(3));
        fifo.push("one", Replies::One);
        assert_eq!(fifo.deliver(Value::Int(1)), Ok(None));
        assert_eq!(fifo.deliver(Value::Okay), Ok(None));
        let pipe = Value::Array(vec![Value::Int(1), Value::Okay, Value::Nil]);
        assert_eq!(fifo.deliver(Value::Nil), Ok(Some(("pipe", pipe))));
        assert_eq!(fifo.deliver(Value::Int(9)), Ok(Some(("one", Value::Int(9)))));
        // A pipeline of one still answers with a list.
        fifo.push("single", Replies::Many(1));
        let single = Value::Array(vec![Value::Int(4)]);
        assert_eq!(fifo.deliver(Value::Int(4)), Ok(Some(("single", single))));
    }

    #[test]
    fn an_unsolicited_reply_is_an_error() {
        let mut fifo: Fifo<&str> = Fifo::new();
        assert_eq!(fifo.deliver(Value::Okay), Err(Unsolicited));
        fifo.push("a", Replies::One);
        assert!(fifo.deliver(Value::Okay).unwrap().is_some());
        assert_eq!(fifo.deliver(Value::Okay), Err(Unsolicited));
    }

    #[test]
    fn a_request_without_replies_is_answered_at_once_and_never_queued() {
        let mut fifo = Fifo::new();
        fifo.push("a", Replies::One);
        assert_eq!(fifo.push("empty", Replies::Many(0)), Some(("empty", Value::Array(vec![]))));
        assert_eq!(fifo.deliver(Value::Int(1)), Ok(Some(("a", Value::Int(1)))));
        assert!(fifo.is_empty());
    }

    #[test]
    fn waiters_can_be_taken_back() {
        let mut fifo = Fifo::new();
        fifo.push(1, Replies::One);
        fifo.push(2, Replies::Many(2));
        fifo.push(3, Replies::One);
        for w in fifo.iter_mut() {
            *w *= 10;
        }
        *fifo.back_mut().unwrap() += 1;
        assert_eq!(fifo.pop_back(), Some(31));
        assert_eq!(fifo.take_all(), vec![10, 20]);
        assert!(fifo.is_empty());
    }
}
