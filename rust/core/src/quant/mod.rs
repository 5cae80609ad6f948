//! GGUF block formats: reference quantize and dequantize.
