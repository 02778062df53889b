//! The pure core against the contract: a row test for each case of sections
//! 6, 7 and 9, and the walk-throughs, asserting the full status and the
//! planned writes at every step. A small in-memory "world"
//! (`tests/common/world.rs`) carries plans out with the simulated API
//! server's merge implementations, as the controller would against a real
//! server.
//!
//! One module for each part of `src/reconcile/` the rows exercise: `pass`
//! (one pass, §6), `block` (§6.2-§6.4), `targets` (§3, 9.16, 9.18),
//! `rollback` (§6.5, §6.8, §6.12, 9.21-9.24) and `delete` (§7).

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/world.rs"]
mod world;

mod block;
mod delete;
mod judge;
mod pass;
mod rollback;
mod targets;
