fn main() {
    println!("openmed-operator {}", env!("CARGO_PKG_VERSION"));
}
