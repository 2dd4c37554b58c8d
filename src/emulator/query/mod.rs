//! `POST /query`: validation in the platform's order, the simulated worker time with the
//! `max_wait_time_sec` 504, and the deterministic stand-in models.

pub(crate) mod encoder;
pub(crate) mod handler;
pub(crate) mod media;
pub(crate) mod reasoner;
pub(crate) mod validate;
