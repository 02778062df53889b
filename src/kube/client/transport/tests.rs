use super::*;
use std::net::TcpListener;
use ureq::unversioned::transport::time::Duration as Left;

/// A connection to a loopback listener, and the server's end of it.
fn pair() -> (LeanTcp, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    let t = LeanTcp {
        stream: Arc::new(client),
        buffers: LazyBuffers::new(4096, 4096),
        held: Vec::new(),
        read_timeout: None,
        write_timeout: None,
        used: false,
    };
    (t, server)
}

fn within(ms: u64) -> NextTimeout {
    NextTimeout {
        after: Left::from_millis(ms),
        ..NextTimeout::default()
    }
}

/// Writes `text` as ureq does: into the output buffer, then transmitted.
fn write(t: &mut LeanTcp, text: &[u8]) {
    t.buffers.output()[..text.len()].copy_from_slice(text);
    t.transmit_output(text.len(), within(5_000)).unwrap();
}

fn waiting(server: &TcpStream) -> usize {
    server.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 256];
    let n = (&*server).read(&mut buf).unwrap_or(0);
    server.set_nonblocking(false).unwrap();
    n
}

/// A request's head and body go out together when it reads its answer,
/// and the answer is read.
#[test]
fn a_request_goes_out_whole_when_its_answer_is_awaited() {
    let (mut t, mut server) = pair();
    write(&mut t, b"PATCH /x HTTP/1.1\r\n\r\n");
    write(&mut t, b"{}");
    assert_eq!(waiting(&server), 0, "nothing is sent before the read");
    let answer = std::thread::spawn(move || {
        let mut got = vec![0u8; 23];
        server.read_exact(&mut got).unwrap();
        server.write_all(b"HTTP/1.1 200 OK\r\n").unwrap();
        got
    });
    assert!(t.await_input(within(5_000)).unwrap());
    assert_eq!(answer.join().unwrap(), b"PATCH /x HTTP/1.1\r\n\r\n{}");
    assert!(t.buffers.input().starts_with(b"HTTP/1.1 200"));
}

/// The socket keeps its timeout while the deadline moves within the
/// slack, and takes a new one when it moves further or grows: a read
/// never waits past the deadline by more than [`SLACK`].
#[test]
fn a_socket_keeps_its_timeout_while_the_deadline_moves_within_the_slack() {
    let (mut t, server) = pair();
    let ms = Duration::from_millis;
    let mut read = |left: u64| {
        (&server).write_all(b"x").unwrap();
        t.await_input(within(left)).unwrap();
        t.stream.read_timeout().unwrap()
    };
    assert_eq!(read(10_000), Some(ms(10_000)));
    assert_eq!(read(9_900), Some(ms(10_000)), "100 ms moved: kept");
    assert_eq!(read(9_700), Some(ms(9_700)), "300 ms moved: set again");
    assert_eq!(read(30_000), Some(ms(30_000)), "longer: set again");
}

/// A server that does not answer: the read ends with a timeout, within
/// the slack of the deadline.
#[test]
fn a_silent_server_times_the_read_out() {
    let (mut t, _server) = pair();
    let start = Instant::now();
    let got = t.await_input(within(200));
    assert!(matches!(got, Err(ureq::Error::Timeout(_))), "{got:?}");
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(190), "{took:?}");
    assert!(took < Duration::from_millis(200) + SLACK + Duration::from_secs(2));
    assert!(matches!(
        t.await_input(within(0)),
        Err(ureq::Error::Timeout(_))
    ));
}

/// A pooled connection is open while nothing waits on it; stray bytes or
/// the server's close mean it cannot carry another request. Only the
/// check as the connection is taken from the pool looks.
#[test]
fn a_connection_is_open_until_stray_bytes_or_a_close() {
    let (mut t, mut server) = pair();
    assert!(t.is_open());
    assert!(t.is_open(), "the probe consumes nothing");
    server.write_all(b"?").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(!t.is_open(), "bytes nobody asked for");

    let (mut t, mut server) = pair();
    (&server).write_all(b"answer").unwrap();
    assert!(t.await_input(within(5_000)).unwrap());
    server.write_all(b"?").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(t.is_open(), "put back in the pool: not looked at");
    assert!(!t.is_open(), "taken from the pool: the stray byte is seen");

    let (mut t, server) = pair();
    drop(server);
    std::thread::sleep(Duration::from_millis(50));
    assert!(!t.is_open(), "closed by the server");
}

/// Connected through the chain: a refused address is an error, not a
/// hang or a panic.
#[test]
fn a_refused_connection_is_an_error() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let agent = ureq::Agent::with_parts(
        ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(5)))
            .build(),
        ().chain(LeanTcpConnector),
        ureq::unversioned::resolver::DefaultResolver::default(),
    );
    let got = agent.get(&format!("http://{addr}/")).call();
    assert!(got.is_err(), "{got:?}");
}
