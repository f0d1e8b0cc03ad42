//! tiny-calc: adds and multiplies.

/// Adds two numbers.
pub fn add(a: i64, b: i64) -> i64 {
    a + b
}

/// Multiplies two numbers.
// TODO: overflow
pub fn mul(a: i64, b: i64) -> i64 {
    a * b
}
