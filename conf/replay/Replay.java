import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.Map;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.compression.CompressorFactory;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;

/**
 * rmqstore replay's sender (jobs/runtime/replay_client.py): one message per stdin line, sent with the real client,
 * one answer per stdout line, in order. A line in: seq, topic, flag, sysFlag, base64 properties (as stored:
 * name 0x01 value 0x02 ...), base64 body (as stored: compressed when sysFlag says so), the topics where the cluster
 * may already hold it (comma-separated), tab-separated. Before the send the cluster is asked for the message's
 * UNIQ_KEY in each of those topics (the broker's IndexFile, queryMessage by unique key); when found the answer is
 * "seq PRESENT topic offsetMsgId", else the message is sent with every property as given (UNIQ_KEY kept: the
 * client sets one only when absent) and the answer is "seq SENT status offsetMsgId queueId queueOffset", or
 * "seq FAILED reason". A line "READY" is written once the producer started. The access key and secret key come from
 * the environment (RMQSTORE_ACCESS_KEY, RMQSTORE_SECRET_KEY), TLS from -Dtls.enable and -Dtls.config.file.
 *
 * <pre>
 * java -cp classes:lib/* Replay namesrv=H:P[;H:P] group=rmqstore-replay timeoutMs=3000 routeWaitMs=20000 tls=false
 * </pre>
 */
public class Replay {
    /** ResponseCode.QUERY_NOT_FOUND: the cluster holds no such message. */
    static final int QUERY_NOT_FOUND = 208;
    /** ResponseCode.TOPIC_NOT_EXIST (a query) and ClientErrorCode.NOT_FOUND_TOPIC_EXCEPTION (a send, thrown before
     * anything is sent): the name server has no route for the topic, yet (a broker just started registers within
     * seconds) or at all. */
    static final int TOPIC_NOT_EXIST = 17, NO_ROUTE = 10005;
    /** How long a topic without a route is asked again; topics still without one then (new topics) are not again. */
    static long routeWaitMs;
    static final java.util.Set<String> routeless = new java.util.HashSet<>();

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new java.util.HashMap<>();
        for (String s : argv) {
            int i = s.indexOf('=');
            a.put(s.substring(0, i), s.substring(i + 1));
        }
        PrintStream out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true, "UTF-8");
        System.setOut(System.err); // the client's own output never mixes with the answers
        String ak = System.getenv("RMQSTORE_ACCESS_KEY"), sk = System.getenv("RMQSTORE_SECRET_KEY");
        String group = a.getOrDefault("group", "rmqstore-replay");
        DefaultMQProducer producer = ak == null || ak.isEmpty()
            ? new DefaultMQProducer(group)
            : new DefaultMQProducer(group, new AclClientRPCHook(new SessionCredentials(ak, sk)));
        producer.setNamesrvAddr(a.get("namesrv"));
        producer.setRetryTimesWhenSendFailed(0); // a retry after a lost answer could store the message twice
        producer.setSendMsgTimeout(Integer.parseInt(a.getOrDefault("timeoutMs", "3000")));
        producer.setUseTLS(Boolean.parseBoolean(a.getOrDefault("tls", "false")));
        routeWaitMs = Long.parseLong(a.getOrDefault("routeWaitMs", "20000"));
        producer.start();
        out.println("READY");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            String[] f = line.split("\t", -1);
            try {
                out.println(f[0] + "\t" + replay(producer, f));
            } catch (Exception e) {
                out.println(f[0] + "\tFAILED\t" + String.valueOf(e).split("\n")[0].replace('\t', ' '));
            }
        }
        producer.shutdown();
        System.exit(0); // the client's own threads would keep the JVM
    }

    static String replay(DefaultMQProducer producer, String[] f) throws Exception {
        Base64.Decoder b64 = Base64.getDecoder();
        Map<String, String> props = MessageDecoder.string2messageProperties(new String(b64.decode(f[4]), StandardCharsets.UTF_8));
        String uniq = props.get("UNIQ_KEY");
        if (uniq != null) {
            for (String topic : f[6].split(",")) {
                MessageExt found = held(producer, topic, uniq);
                if (found != null) {
                    return "PRESENT\t" + topic + "\t" + found.getMsgId();
                }
            }
        }
        int sysFlag = Integer.parseInt(f[3]);
        byte[] body = b64.decode(f[5]);
        if ((sysFlag & MessageSysFlag.COMPRESSED_FLAG) != 0) {
            body = CompressorFactory.getCompressor(MessageSysFlag.getCompressionType(sysFlag)).decompress(body);
        }
        Message m = new Message(f[1], body);
        m.setFlag(Integer.parseInt(f[2]));
        MessageAccessor.setProperties(m, props);
        SendResult r = send(producer, m);
        return "SENT\t" + r.getSendStatus() + "\t" + r.getOffsetMsgId() + "\t" + r.getMessageQueue().getQueueId()
            + "\t" + r.getQueueOffset() + "\t" + m.getProperty("UNIQ_KEY");
    }

    /** The send, asked again while the topic has no route (nothing was sent then), at most routeWaitMs. */
    static SendResult send(DefaultMQProducer producer, Message m) throws Exception {
        long until = System.currentTimeMillis() + routeWaitMs;
        while (true) {
            try {
                return producer.send(m);
            } catch (MQClientException e) {
                if (e.getResponseCode() != NO_ROUTE || System.currentTimeMillis() > until) {
                    throw e;
                }
                Thread.sleep(500);
            }
        }
    }

    /** The message of that UNIQ_KEY the cluster holds in that topic, or null when it holds none: the query found
     * none, or the topic has had no route for routeWaitMs (it does not exist on the cluster). */
    static MessageExt held(DefaultMQProducer producer, String topic, String uniq) throws Exception {
        long until = System.currentTimeMillis() + (routeless.contains(topic) ? 0 : routeWaitMs);
        while (true) {
            try {
                return producer.getDefaultMQProducerImpl().getMqClientFactory().getMQAdminImpl()
                    .queryMessageByUniqKey(topic, uniq, 0L, Long.MAX_VALUE);
            } catch (MQClientException e) {
                if (e.getResponseCode() == QUERY_NOT_FOUND) {
                    return null;
                }
                if (e.getResponseCode() != TOPIC_NOT_EXIST) {
                    throw e;
                }
                if (System.currentTimeMillis() > until) {
                    routeless.add(topic);
                    return null;
                }
                Thread.sleep(500);
            }
        }
    }
}
