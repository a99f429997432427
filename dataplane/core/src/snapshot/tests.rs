//! Unit tests of the snapshot and builder.
