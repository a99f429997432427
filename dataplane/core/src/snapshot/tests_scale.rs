//! Scale test and builder property test.
