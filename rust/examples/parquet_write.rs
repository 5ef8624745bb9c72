//! The arrow-rs side of `benchmarks/parquet_writers.py`: write the record batches of an Arrow
//! IPC stream to Parquet with the `parquet` crate, encoded as `amqpcap.table_files.parquet_options`
//! asks of pyarrow (statistics of the four columns readers filter on, a dictionary for the
//! dictionary columns only, integers and timestamps DELTA_BINARY_PACKED, snappy pages, one row
//! group per batch), and print the best time of `repeat` writes in seconds.
//!
//! cargo run --release --example parquet_write --features parquet-bench -- IN.arrow OUT.parquet REPEAT

use std::fs::File;
use std::time::Instant;

use arrow_ipc::reader::StreamReader;
use arrow_schema::{DataType, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

/// `amqpcap.table_files.PARQUET_STATISTICS_COLUMNS`
const STATISTICS_COLUMNS: [&str; 4] = ["stream", "packet", "ts", "last_packet"];

fn properties(schema: &Schema, batch_rows: usize) -> WriterProperties {
    let mut b = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::None)
        .set_max_row_group_size(batch_rows.max(1));
    for f in schema.fields() {
        let path = ColumnPath::from(f.name().as_str());
        match f.data_type() {
            DataType::Dictionary(..) => b = b.set_column_dictionary_enabled(path.clone(), true),
            t if t.is_integer() || matches!(t, DataType::Timestamp(..)) => {
                b = b.set_column_encoding(path.clone(), Encoding::DELTA_BINARY_PACKED)
            }
            _ => {}
        }
        if STATISTICS_COLUMNS.contains(&f.name().as_str()) {
            b = b.set_column_statistics_enabled(path, EnabledStatistics::Chunk);
        }
    }
    b.build()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, input, output, repeat] = args.as_slice() else {
        return Err("usage: parquet_write IN.arrow OUT.parquet REPEAT".into());
    };
    let reader = StreamReader::try_new(std::io::BufReader::new(File::open(input)?), None)?;
    let schema = reader.schema();
    let batches = reader.collect::<Result<Vec<_>, _>>()?;
    let batch_rows = batches.iter().map(|b| b.num_rows()).max().unwrap_or(1);
    let mut best = f64::INFINITY;
    for _ in 0..repeat.parse::<usize>()? {
        let start = Instant::now();
        let mut w = ArrowWriter::try_new(File::create(output)?, schema.clone(), Some(properties(&schema, batch_rows)))?;
        for b in &batches {
            w.write(b)?;
            w.flush()?; // a row group per batch, as pyarrow's writer makes one per write
        }
        w.close()?;
        best = best.min(start.elapsed().as_secs_f64());
    }
    println!("{best:.4}");
    Ok(())
}
