package local.neo4j;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.CountDownLatch;

import org.neo4j.configuration.GraphDatabaseInternalSettings;
import org.neo4j.configuration.GraphDatabaseSettings;
import org.neo4j.configuration.connectors.BoltConnector;
import org.neo4j.configuration.connectors.HttpConnector;
import org.neo4j.configuration.connectors.HttpsConnector;
import org.neo4j.configuration.helpers.SocketAddress;
import org.neo4j.dbms.api.DatabaseManagementService;
import org.neo4j.dbms.api.DatabaseManagementServiceBuilder;
import org.neo4j.graphdb.GraphDatabaseService;
import org.neo4j.io.ByteUnit;
import org.neo4j.logging.Level;
import org.neo4j.logging.log4j.Log4jLogProvider;

/**
 * Runs Neo4j Community embedded with only a Bolt connector on localhost, no auth.
 *
 * <p>Options (command line wins over environment, environment over defaults):
 * <pre>
 *   --dir DIR      NEO4J_LOCAL_DIR   state dir (db under DIR/db)   default ./.state
 *   --port N       NEO4J_LOCAL_PORT  Bolt port                     default 7687
 *   --host H       NEO4J_LOCAL_HOST  Bolt listen host              default 127.0.0.1
 *   --ready FILE   NEO4J_LOCAL_READY READY file (holds bolt URI)   default DIR/READY
 * </pre>
 */
public final class Launcher {

    private Launcher() {}

    public static void main(String[] args) throws Exception {
        String dirArg = env("NEO4J_LOCAL_DIR", ".state");
        String portArg = env("NEO4J_LOCAL_PORT", "7687");
        String host = env("NEO4J_LOCAL_HOST", "127.0.0.1");
        String readyArg = System.getenv("NEO4J_LOCAL_READY");

        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            switch (a) {
                case "--dir" -> dirArg = value(args, ++i, a);
                case "--port" -> portArg = value(args, ++i, a);
                case "--host" -> host = value(args, ++i, a);
                case "--ready" -> readyArg = value(args, ++i, a);
                case "-h", "--help" -> {
                    System.out.println("usage: Launcher [--dir DIR] [--port N] [--host H] [--ready FILE]");
                    return;
                }
                default -> fail("unknown argument: " + a);
            }
        }

        int port;
        try {
            port = Integer.parseInt(portArg);
        } catch (NumberFormatException e) {
            fail("invalid port: " + portArg);
            return;
        }
        Path stateDir = Path.of(dirArg).toAbsolutePath().normalize();
        Path homeDir = stateDir.resolve("db");
        Path ready = readyArg == null || readyArg.isBlank()
                ? stateDir.resolve("READY")
                : Path.of(readyArg).toAbsolutePath().normalize();
        String boltUri = "bolt://" + host + ":" + port;

        Files.createDirectories(homeDir);
        Files.deleteIfExists(ready);

        log("starting Neo4j embedded, home=" + homeDir + ", bolt=" + boltUri);
        Instant t0 = Instant.now();

        DatabaseManagementService dbms;
        try {
            dbms = new DatabaseManagementServiceBuilder(homeDir)
                    .setUserLogProvider(new Log4jLogProvider(System.out, Level.WARN))
                    .setConfig(BoltConnector.enabled, true)
                    .setConfig(BoltConnector.listen_address, new SocketAddress(host, port))
                    .setConfig(BoltConnector.advertised_address, new SocketAddress(host, port))
                    .setConfig(BoltConnector.encryption_level, BoltConnector.EncryptionLevel.DISABLED)
                    .setConfig(HttpConnector.enabled, false)
                    .setConfig(HttpsConnector.enabled, false)
                    .setConfig(GraphDatabaseSettings.auth_enabled, false)
                    .setConfig(GraphDatabaseSettings.pagecache_memory, ByteUnit.mebiBytes(256))
                    .setConfig(GraphDatabaseSettings.memory_transaction_global_max_size, ByteUnit.mebiBytes(256))
                    .setConfig(GraphDatabaseSettings.memory_transaction_max_size, ByteUnit.mebiBytes(128))
                    .setConfig(GraphDatabaseSettings.preallocate_logical_logs, false)
                    .setConfig(GraphDatabaseSettings.logical_log_rotation_threshold, ByteUnit.mebiBytes(32))
                    .setConfig(GraphDatabaseSettings.keep_logical_logs, "100M size")
                    // Internal setting: netty's default 5 s quiet period per event loop group
                    // (Bolt + internal loopback) makes every shutdown take ~10 s.
                    .setConfig(GraphDatabaseInternalSettings.netty_server_shutdown_quiet_period, 0)
                    .build();
        } catch (RuntimeException e) {
            log("failed to start: " + e);
            e.printStackTrace(System.out);
            System.exit(1);
            return;
        }

        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            log("shutting down");
            try {
                Files.deleteIfExists(ready);
            } catch (IOException ignored) {
                // best effort
            }
            try {
                dbms.shutdown();
            } catch (RuntimeException e) {
                log("error during shutdown: " + e);
            }
            try {
                Files.deleteIfExists(ready);
            } catch (IOException ignored) {
                // best effort
            }
            log("stopped");
            stopped.countDown();
        }, "neo4j-local-shutdown"));

        GraphDatabaseService db = dbms.database(GraphDatabaseSettings.DEFAULT_DATABASE_NAME);
        if (!db.isAvailable(Duration.ofMinutes(2).toMillis())) {
            log("database did not become available in time");
            System.exit(1);
        }
        if (!waitForPort(host, port, Duration.ofSeconds(30))) {
            log("bolt port " + port + " is not accepting connections");
            System.exit(1);
        }

        Path tmp = ready.resolveSibling(ready.getFileName() + ".tmp");
        Files.createDirectories(ready.toAbsolutePath().getParent());
        Files.writeString(tmp, boltUri + "\n", StandardCharsets.UTF_8);
        Files.move(tmp, ready, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        log("ready in " + Duration.between(t0, Instant.now()).toMillis() + " ms: " + boltUri);

        stopped.await();
    }

    private static boolean waitForPort(String host, int port, Duration timeout) throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (System.nanoTime() < deadline) {
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress(host, port), 1000);
                return true;
            } catch (IOException e) {
                Thread.sleep(200);
            }
        }
        return false;
    }

    private static String env(String name, String dflt) {
        String v = System.getenv(name);
        return v == null || v.isBlank() ? dflt : v;
    }

    private static String value(String[] args, int i, String flag) {
        if (i >= args.length) {
            fail("missing value for " + flag);
        }
        return args[i];
    }

    private static void fail(String msg) {
        System.err.println("neo4j-local: " + msg);
        System.exit(2);
    }

    private static void log(String msg) {
        System.out.println(Instant.now() + " [neo4j-local] " + msg);
        System.out.flush();
    }
}
