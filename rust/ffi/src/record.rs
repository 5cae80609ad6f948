//! Records whose field defaults are written once.
//!
//! The options and requests of the foreign API (`SessionOptions`, `ModelOptions`,
//! `GenerateRequest`) are uniffi records, so that Kotlin and Swift build them with named
//! arguments and defaults, and the same types are the JSON protocol's (deserialized by serde,
//! a missing key taking its default). [`uniffi_record_with_defaults!`] declares such a record
//! from one list: each field's default literal becomes its `#[uniffi(default = ...)]` (what the
//! generated constructors use) and its value in the record's `Default` (what serde and Rust
//! callers use), so the two cannot drift apart.

/// A default literal as a field's value: a string for `String`, a number for itself, `None` for
/// an `Option`, `[]` for an empty `Vec`. Implemented only where uniffi accepts the literal as a
/// default, so a literal of the wrong type does not compile.
pub(crate) trait FromDefaultLiteral<L> {
    /// The field's value for the literal.
    fn from_default_literal(literal: L) -> Self;
}

impl FromDefaultLiteral<&'static str> for String {
    fn from_default_literal(literal: &'static str) -> String {
        literal.to_string()
    }
}

macro_rules! literal_is_the_value {
    ($($t:ty),*) => {$(
        impl FromDefaultLiteral<$t> for $t {
            fn from_default_literal(literal: $t) -> $t {
                literal
            }
        }
    )*};
}

literal_is_the_value!(bool, i32, u32, u64, f32);

impl<T> FromDefaultLiteral<Option<T>> for Option<T> {
    fn from_default_literal(literal: Option<T>) -> Option<T> {
        literal
    }
}

impl<T> FromDefaultLiteral<[T; 0]> for Vec<T> {
    fn from_default_literal(_: [T; 0]) -> Vec<T> {
        Vec::new()
    }
}

/// The value of a field of type `T` whose default literal is `literal`.
pub(crate) fn default_value<T: FromDefaultLiteral<L>, L>(literal: L) -> T {
    T::from_default_literal(literal)
}

/// Declares a uniffi record with `field: Type = default,` fields: the default literal (`"auto"`,
/// `256`, `0.8`, `false`, `None`, `[]`) is the field's `#[uniffi(default)]` and its value in the
/// generated `impl Default`. Attributes before the struct (derives, serde's) and before each
/// field (doc comments, serde's) are kept.
macro_rules! uniffi_record_with_defaults {
    (
        $(#[$attr:meta])*
        pub struct $name:ident {
            $(
                $(#[$field_attr:meta])*
                pub $field:ident: $ty:ty = $default:tt,
            )*
        }
    ) => {
        $(#[$attr])*
        pub struct $name {
            $(
                $(#[$field_attr])*
                #[uniffi(default = $default)]
                pub $field: $ty,
            )*
        }

        impl Default for $name {
            fn default() -> $name {
                $name {
                    $($field: $crate::record::default_value::<$ty, _>($default),)*
                }
            }
        }
    };
}

pub(crate) use uniffi_record_with_defaults;
