//! The Redis protocol: commands built from Python arguments, replies scanned and parsed from
//! a read buffer, the connection handshake, and replies turned into Python objects.

pub mod command;
pub mod handshake;
pub mod read_buf;
pub mod reply;
pub mod resp;

pub use command::{Replies, Request};
pub use read_buf::ReadBuf;
pub use reply::Reply;
