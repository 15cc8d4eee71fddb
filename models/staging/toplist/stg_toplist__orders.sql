{#- One row per order event_id: the first copy received (by arrival, then Kafka partition and
    offset), so a redelivered or repeated order counts once, merged by the engine or not.
    Voided orders (sql/0026) are left out. -#}

with

source as (

    select * from {{ source('toplist', 'orders') }}
    where event_id not in (select event_id from {{ source('toplist', 'order_voids') }})

),

first_copies as (

    select
        event_id,
        argMin(
            tuple(order_id, product_id, buyer_id, units, amount_cents, event_time),
            tuple(_received_at, _partition, _offset)
        ) as first_copy
    from source
    group by event_id

)

select
    event_id,
    tupleElement(first_copy, 1) as order_id,
    tupleElement(first_copy, 2) as product_id,
    tupleElement(first_copy, 3) as buyer_id,
    tupleElement(first_copy, 4) as units,
    tupleElement(first_copy, 5) as amount_cents,
    tupleElement(first_copy, 6) as event_time
from first_copies
