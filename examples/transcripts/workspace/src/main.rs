fn main() {
    // TODO: read the numbers from the command line
    println!("{}", tiny_calc::add(2, 3));
}
