//! What the load-test processes and the callgrind probe share: the peers (a bare decision
//! endpoint, a tiny upstream), the minimal app measured with and without the tower layer,
//! and the server's own API app built in process. The probe counts instructions on exactly
//! the code the wrk scripts load over HTTP.

#![deny(missing_docs)]

pub mod apps;
pub mod server;
